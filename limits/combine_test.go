package limits_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
)

// holdFirst holds the client's first single command until release says so,
// runs after once the first call has loaded its script, and records the
// length of every pipeline of scripts.
type holdFirst struct {
	release func() bool
	after   func()
	held    atomic.Bool
	flushed atomic.Bool
	mu      sync.Mutex
	pipes   []int
}

func (h *holdFirst) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		first := h.held.CompareAndSwap(false, true)
		if first && !testkit.Poll(10*time.Second, h.release) {
			return fmt.Errorf("the other calls never queued")
		}
		err := next(ctx, cmd)
		if cmd.Name() == "eval" && h.after != nil && h.flushed.CompareAndSwap(false, true) {
			h.after() // the first call has just loaded the script
		}
		return err
	}
}

func (h *holdFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n := cmds[0].Name(); n != "hello" && n != "auth" && n != "select" && n != "client" { // not a new connection's handshake
			h.mu.Lock()
			h.pipes = append(h.pipes, len(cmds))
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// Calls that arrive while a batch is on its way go together in the next
// one, each gets its own reply (a failing script fails only its call), and
// a script Redis forgot meanwhile is sent again in full.
func TestConcurrentScriptsGoInOneBatch(t *testing.T) {
	for _, flush := range []bool{false, true} {
		// Not parallel: a flush would change what the other case sees.
		t.Run(fmt.Sprintf("script-cache-flushed=%v", flush), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 20})
			t.Cleanup(func() { c.Close() })
			// A script of this test's own, so another test's flush or load
			// cannot change what this one sees.
			script := redis.NewScript(fmt.Sprintf(`-- %s
if ARGV[1] == 'bad' then return redis.error_reply('bad call') end
return {ARGV[1]}`, testkit.Namespace("combine")))
			g := limits.NewGates(c)
			const n = 12
			h := &holdFirst{release: func() bool { return limits.QueuedCalls(g) == n-1 }}
			if flush {
				other := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
				t.Cleanup(func() { other.Close() })
				h.after = func() { other.ScriptFlush(context.Background()) }
			}
			c.AddHook(h)

			ctx := context.Background()
			args := make([]string, n)
			for i := range args {
				args[i] = fmt.Sprintf("call-%d", i)
			}
			args[5] = "bad"
			res := make([][]any, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			run := func(i int) {
				defer wg.Done()
				res[i], errs[i] = limits.RunBatched(ctx, g, script, []string{"k"}, args[i])
			}
			wg.Add(1)
			go run(0)
			testkit.Eventually(t, 5*time.Second, "the first call is on its way", h.held.Load)
			for i := 1; i < n; i++ {
				wg.Add(1)
				go run(i)
			}
			wg.Wait()

			for i := range args {
				if args[i] == "bad" {
					if errs[i] == nil || errs[i].Error() != "bad call" {
						t.Errorf("call %d: error %v, want the script's own", i, errs[i])
					}
					continue
				}
				if errs[i] != nil || len(res[i]) != 1 || res[i][0] != args[i] {
					t.Errorf("call %d: got %v %v, want [%s]", i, res[i], errs[i], args[i])
				}
			}
			want := []int{n - 1}
			if flush {
				want = []int{n - 1, n - 1} // by sha, then in full
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if fmt.Sprint(h.pipes) != fmt.Sprint(want) {
				t.Errorf("pipelines sent %v, want %v (the %d calls that queued behind the first in one batch)", h.pipes, want, n-1)
			}
		})
	}
}

// Commands queued with Pipelined while a batch is on its way go in the next
// batch with the scripts that queued meanwhile: one pipeline; each call
// gets its own commands' replies, and a failing command fails only its
// call.
func TestPipelinedCommandsShareTheScriptsBatch(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, PoolSize: 20})
	t.Cleanup(func() { c.Close() })
	ns := testkit.Namespace("combine-fill")
	script := redis.NewScript(fmt.Sprintf("-- %s\nreturn {ARGV[1]}", ns))
	g := limits.NewGates(c)
	const scripts, fills = 4, 3
	h := &holdFirst{release: func() bool { return limits.QueuedCalls(g) == scripts+fills }}
	c.AddHook(h)
	ctx := context.Background()
	other := redis.NewClient(&redis.Options{Addr: redisSrv.Addr}) // not held
	t.Cleanup(func() { other.Close() })
	if err := other.Set(ctx, ns+":text", "not a number", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = limits.RunBatched(ctx, g, script, []string{"k"}, "first") })
	testkit.Eventually(t, 5*time.Second, "the first call is on its way", h.held.Load)
	res := make([][]any, scripts)
	for i := range scripts {
		wg.Go(func() { res[i], _ = limits.RunBatched(ctx, g, script, []string{"k"}, fmt.Sprint(i)) })
	}
	cmds := make([][]redis.Cmder, fills)
	errs := make([]error, fills)
	for i := range fills {
		wg.Go(func() {
			cmds[i], errs[i] = g.Pipelined(ctx, func(p redis.Pipeliner) {
				key := fmt.Sprintf("%s:%d", ns, i)
				if i == 1 {
					key = ns + ":text" // INCR fails
				}
				p.Set(ctx, fmt.Sprintf("%s:set%d", ns, i), i, time.Minute)
				p.Incr(ctx, key)
			})
		})
	}
	wg.Wait()
	for i := range scripts {
		if len(res[i]) != 1 || res[i][0] != fmt.Sprint(i) {
			t.Errorf("script call %d: reply %v", i, res[i])
		}
	}
	for i := range fills {
		if len(cmds[i]) != 2 {
			t.Fatalf("fill %d: got %d commands back, want its 2", i, len(cmds[i]))
		}
		incr := cmds[i][1].(*redis.IntCmd)
		switch {
		case i == 1 && (errs[i] == nil || errs[i] != incr.Err()):
			t.Errorf("fill 1: error %v, want its INCR's (%v)", errs[i], incr.Err())
		case i != 1 && (errs[i] != nil || incr.Val() != 1):
			t.Errorf("fill %d: INCR %d, error %v; want 1, nil", i, incr.Val(), errs[i])
		}
		if v, _ := other.Get(ctx, fmt.Sprintf("%s:set%d", ns, i)).Int(); v != i {
			t.Errorf("fill %d: its SET left %d", i, v)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []int{scripts + 2*fills}; fmt.Sprint(h.pipes) != fmt.Sprint(want) {
		t.Errorf("pipelines sent %v, want %v: every call that queued behind the first in one", h.pipes, want)
	}
}
