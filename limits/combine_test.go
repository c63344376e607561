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
		if n := cmds[0].Name(); n == "evalsha" || n == "eval" { // not a new connection's handshake
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
