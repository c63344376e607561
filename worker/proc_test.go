package worker_test

// Helpers for the crash and Redis-fault tests: the real hooklane binary run
// as a subprocess, a TCP proxy that cuts a worker off from Redis at an exact
// command, and a receiver that tells the events it accepted apart.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
	procSeq atomic.Int64 // names each process's race report
)

// hooklaneBin builds the hooklane command once per test run (TestMain
// removes it) and returns its path (the root package's test binary, which
// is the hooklane command under HOOKLANE_TEST_MAIN=1): under the race detector when the
// tests are (the packages are in the build cache already, so it is a
// link), so that the paths the real processes drive are race-checked too
// (startProc fails a test whose process reported a race). make test names
// a binary it built in HOOKLANE_TEST_BIN instead: the root package's test
// binary, race-built and linked with the other test binaries, which runs
// as the hooklane command under HOOKLANE_TEST_MAIN=1 (startProc sets it).
func hooklaneBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("HOOKLANE_TEST_BIN")
	binOnce.Do(func() {
		// binDir also holds the processes' race reports.
		if binDir, binErr = os.MkdirTemp("", "hooklane-bin-"); binErr != nil || bin != "" {
			return
		}
		// The root package's test binary, as make test builds it: it runs
		// as the hooklane command under HOOKLANE_TEST_MAIN=1, with the
		// fault points' switch (HOOKLANE_FAULT) the release build lacks.
		args := []string{"test", "-c", "-o", filepath.Join(binDir, "hooklane")}
		if raceBuild {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = ".." // the module root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go test -c: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	if bin != "" {
		return bin
	}
	return filepath.Join(binDir, "hooklane")
}

// proc is one `hooklane worker` process.
type proc struct {
	cmd  *exec.Cmd
	log  *testkit.Buffer
	done chan struct{} // closed when it has exited
	err  error         // Wait's result, set before done is closed
}

// crashEnv is the worker configuration of these tests: short polls and
// backoff so that what is measured is hooklane and asynq's lease, not idle
// intervals.
var crashEnv = []string{
	"HOOKLANE_POLL_INTERVAL=50ms",
	"HOOKLANE_FORWARD_INTERVAL=100ms",
	"HOOKLANE_BACKOFF_BASE=200ms",
	"HOOKLANE_BACKOFF_MAX=1s",
	"HOOKLANE_CONNECT_TIMEOUT=1s",
	"HOOKLANE_REQUEST_TIMEOUT=10s",
	"HOOKLANE_SHUTDOWN_TIMEOUT=2s",
	"HOOKLANE_RESCUE_INTERVAL=250ms", // the rescuer's sweep in a second, not 5 min
	"HOOKLANE_RESCUE_SWEEP=1s",
	"HOOKLANE_ALLOWED_CIDRS=127.0.0.0/8", // the receivers are on loopback
}

// startProc runs `hooklane worker` on redisURL and namespace ns; env adds to
// or overrides crashEnv. It returns once the worker logged that it started,
// and kills it when the test ends. The log is shown if the test failed.
func startProc(t testing.TB, redisURL, ns string, env ...string) *proc {
	t.Helper()
	testkit.Heavy(t, "starts hooklane worker processes")
	p := &proc{log: &testkit.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(hooklaneBin(t), "worker")
	race := filepath.Join(binDir, fmt.Sprintf("race-%d", procSeq.Add(1)))
	p.cmd.Env = append(append([]string{"REDIS_URL=" + redisURL, "HOOKLANE_NAMESPACE=" + ns, "GORACE=log_path=" + race, "HOOKLANE_TEST_MAIN=1"},
		crashEnv...), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		// The race detector writes its report to log_path.<pid>.
		if reports, _ := filepath.Glob(race + ".*"); len(reports) > 0 {
			b, _ := os.ReadFile(reports[0])
			t.Errorf("hooklane worker (pid %d) reported a data race:\n%s", p.cmd.Process.Pid, b)
		}
		if t.Failed() {
			t.Logf("hooklane worker (pid %d) log:\n%s", p.cmd.Process.Pid, tail(p.log.String(), 40, "failed to dial"))
		}
	})
	testkit.Eventually(t, 10*time.Second, "hooklane worker to start", func() bool {
		return strings.Contains(p.log.String(), "worker started") || !p.alive()
	})
	if !p.alive() {
		t.Fatalf("hooklane worker exited at start (%v):\n%s", p.err, p.log.String())
	}
	return p
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the exit. It returns when the signal was
// sent.
func (p *proc) kill() time.Time {
	at := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return at
}

// wait waits at most d for the process to exit and reports whether it did.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// tail returns the last lines of s, leaving out those containing skip
// (go-redis logs every refused dial while Redis is down).
func tail(s string, lines int, skip string) string {
	var l []string
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if !strings.Contains(line, skip) {
			l = append(l, line)
		}
	}
	return strings.Join(l[max(len(l)-lines, 0):], "\n")
}

// faultProxy forwards TCP connections from a worker to Redis. Armed with a
// byte pattern, it stops at the first client write that contains it: that
// write is not forwarded, trip runs (it kills the worker), and every
// connection is closed and new ones refused. So the worker is stopped right
// before one exact Redis command, whatever the timing.
type faultProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	pattern []byte
	trip    func()
	tripped bool
	once    bool // fail only the matching write's connection, then heal
	sticky  bool // fail every matching write's connection until heal
	failed  int  // writes failed so, with once
	conns   []net.Conn
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	return p
}

func (p *faultProxy) URL() string { return "redis://" + p.ln.Addr().String() + "/0" }

// arm makes the proxy stop at the first command containing pattern.
func (p *faultProxy) arm(pattern []byte, trip func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.trip = pattern, trip
}

// failOnce makes the proxy drop the connection of the first command
// containing pattern, unanswered, and then forward everything again: one
// Redis command fails, as in a network blip.
func (p *faultProxy) failOnce(pattern []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.once = pattern, true
}

// failUntilHealed makes the proxy drop the connection of every command
// containing pattern, unanswered, until heal: a command fails however
// often the client retries it.
func (p *faultProxy) failUntilHealed(pattern []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.sticky = pattern, true
}

// heal ends failUntilHealed.
func (p *faultProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.sticky = nil, false
}

func (p *faultProxy) failures() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

func (p *faultProxy) hasTripped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tripped
}

func (p *faultProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.tripped {
			p.mu.Unlock()
			c.Close()
			if s != nil {
				s.Close()
			}
			continue
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(c, s); c.Close(); s.Close() }()
		go p.forward(c, s)
	}
}

// forward copies client writes to the server, checking each against the
// armed pattern (with the previous write's tail, in case it straddles two).
func (p *faultProxy) forward(c, s net.Conn) {
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 64<<10)
	var prev []byte
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		chunk := buf[:n]
		p.mu.Lock()
		if p.tripped {
			p.mu.Unlock()
			return
		}
		k := len(p.pattern)
		if k > 0 && bytes.Contains(append(prev, chunk...), p.pattern) && (p.once || p.sticky) {
			if p.once {
				p.pattern, p.once = nil, false
			}
			p.failed++
			p.mu.Unlock()
			return // closes this connection, the command unanswered
		}
		if k > 0 && bytes.Contains(append(prev, chunk...), p.pattern) {
			p.tripped = true
			p.trip()
			for _, c := range p.conns {
				c.Close()
			}
			p.mu.Unlock()
			return
		}
		_, err = s.Write(chunk)
		p.mu.Unlock()
		if err != nil {
			return
		}
		if k > 0 {
			prev = append(prev, chunk...)
			prev = slices.Clone(prev[max(len(prev)-k, 0):])
		}
	}
}

// respKeys is how keys that follow one another among a command's
// arguments look on the wire (RESP bulk strings).
func respKeys(keys ...string) []byte {
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "$%d\r\n%s", len(k), k)
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// tally is what became of a set of published events.
type tally struct {
	published, delivered, dead int
	lost                       []string // neither completed nor archived (or gone from Redis)
	duplicates                 int      // acceptances beyond the first, summed over events
	requests                   int
}

func (c tally) String() string {
	return fmt.Sprintf("published %d: delivered %d, dead %d, lost %d; %d requests, %d duplicates",
		c.published, c.delivered, c.dead, len(c.lost), c.requests, c.duplicates)
}

// settle waits at most timeout for every event in ids (bound for sub) to
// end delivered or dead (testkit.Ended), then counts. A completed task whose event the
// receiver never accepted is an error: it would be a silent loss.
func settle(t testing.TB, insp *asynq.Inspector, rdb redis.UniversalClient, ns, sub string, ids []string, rc *testkit.Sink, timeout time.Duration) tally {
	t.Helper()
	state := map[string]asynq.TaskState{}
	why := map[string]string{}
	done := func() bool {
		all := true
		for _, id := range ids {
			if s := state[id]; s == asynq.TaskStateCompleted || s == asynq.TaskStateArchived {
				continue
			}
			all = false
			st, last, err := testkit.Ended(insp, rdb, ns, sub, id)
			if err != nil {
				why[id] = err.Error()
				continue
			}
			state[id], why[id] = st, last
		}
		return all
	}
	// Stop early when the queue has nothing left to run: a task that is
	// neither there nor finished is gone and waiting will not bring it back.
	idle := func() bool { return testkit.Settled(t, rdb, insp, ns) }
	testkit.PollEvery(timeout, 100*time.Millisecond, func() bool { return done() || idle() })
	done() // states as they are now, not as when idle was seen
	accepted := map[string]int{}
	hits := rc.Got()
	for _, h := range hits {
		if h.Accepted {
			accepted[h.ID]++
		}
	}
	c := tally{published: len(ids), requests: len(hits)}
	for _, id := range ids {
		c.duplicates += max(accepted[id]-1, 0)
		switch state[id] {
		case asynq.TaskStateCompleted:
			c.delivered++
			if accepted[id] == 0 {
				t.Errorf("event %s completed but the receiver never accepted it", id)
			}
		case asynq.TaskStateArchived:
			c.dead++
		default:
			c.lost = append(c.lost, id)
			if len(c.lost) <= 5 {
				t.Logf("not settled: %s: %s %s", id, stateName(state[id]), why[id])
			}
		}
	}
	return c
}

func stateName(s asynq.TaskState) string {
	if s == 0 {
		return "not found"
	}
	return s.String()
}
