package worker_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// rawServer accepts TCP connections on 127.0.0.1 and hands each, after the
// request headers were read, to serve. It stops when the test ends.
func rawServer(t *testing.T, serve func(c net.Conn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				go func() { <-done; c.Close() }()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				serve(c)
			})
		}
	}()
	t.Cleanup(func() { close(done); l.Close(); wg.Wait() })
	return "http://" + l.Addr().String() + "/hook"
}

// TestHostileReceivers: each misbehaving endpoint costs at most one request
// timeout, ends as a readable dead letter (one attempt allowed), and leaves
// the worker delivering to a healthy endpoint.
func TestHostileReceivers(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	cases := []struct {
		name, wantErr string
		url           func(t *testing.T) string
	}{
		{"slowloris headers", "Client.Timeout", func(t *testing.T) string {
			return rawServer(t, func(c net.Conn) {
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nX-Slow: ")
				for range 100 { // bounded: 10s at most, far past the timeout
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}},
		{"huge header block", "headers exceeded", func(t *testing.T) string {
			return rawServer(t, func(c net.Conn) {
				fmt.Fprint(c, "HTTP/1.1 500 Internal Server Error\r\n")
				line := "X-Junk: " + strings.Repeat("j", 1000) + "\r\n"
				for range 1024 { // 1 MiB of headers
					if _, err := fmt.Fprint(c, line); err != nil {
						return
					}
				}
				fmt.Fprint(c, "\r\n")
			})
		}},
		{"reset mid-response", "connection", func(t *testing.T) string {
			return rawServer(t, func(c net.Conn) {
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-")
				c.(*net.TCPConn).SetLinger(0) // close sends RST
			})
		}},
		{"TLS handshake failure", "certificate", func(t *testing.T) string {
			s := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			t.Cleanup(s.Close)
			return s.URL // its certificate is signed by no CA the worker trusts
		}},
		{"connection refused", "connection refused", func(t *testing.T) string {
			p, err := deploy.NewRefusingPort()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return "http://" + p.Addr + "/hook"
		}},
	}
	b := setup(t, worker.Config{RequestTimeout: timeout, ConnectTimeout: time.Second})
	healthy := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "healthy", URL: healthy.URL, EventTypes: []string{"ping"}})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("hostile%d", i)
			b.put(t, tasks.Subscriber{ID: id, URL: tc.url(t), EventTypes: []string{id}, MaxAttempts: 1})
			start := time.Now()
			b.publish(t, "e-"+id, id)
			var dl []tasks.DeadLetter
			testkit.Eventually(t, 3*timeout, "dead letter", func() bool {
				dl = b.dead(t, producer.DeadLetterQuery{Subscriber: id})
				return len(dl) == 1
			})
			if len(dl[0].Attempts) != 1 || !strings.Contains(dl[0].Attempts[0].Error+dl[0].Error, tc.wantErr) {
				t.Fatalf("dead letter %+v; want one attempt failing with %q", dl[0], tc.wantErr)
			}
			if took := dl[0].Attempts[0].At.Sub(start); took > timeout+time.Second {
				t.Fatalf("the attempt took %v, more than the %v request timeout", took, timeout)
			}
			before := healthy.Count()
			b.publish(t, "after-"+id, "ping")
			testkit.Eventually(t, 5*time.Second, "healthy delivery", func() bool { return healthy.Count() == before+1 })
		})
	}
}

// An endpoint that answers 200 and then sends a body without end: the
// worker reads 64 KiB of it, records the delivery and drops the
// connection, long before its request timeout.
func TestEndlessBodyIsCut(t *testing.T) {
	t.Parallel()
	const timeout = 30 * time.Second
	b := setup(t, worker.Config{RequestTimeout: timeout})
	var written atomic.Int64
	cut := make(chan time.Duration, 1)
	url := rawServer(t, func(c net.Conn) {
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
		start := time.Now()
		chunk := []byte(strings.Repeat("x", 4096))
		for time.Since(start) < 2*timeout { // without end, as far as the worker can tell
			n, err := c.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				cut <- time.Since(start)
				return
			}
		}
		cut <- -1
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: url})
	b.publish(t, "e", "t")
	testkit.Eventually(t, 10*time.Second, "completed", func() bool {
		st, _, err := testkit.Ended(b.insp, b.rdb, b.ns, "s", "e")
		return err == nil && st == asynq.TaskStateCompleted
	})
	var took time.Duration
	select {
	case took = <-cut:
	case <-time.After(timeout):
		t.Fatal("the worker never dropped the connection")
	}
	// What the server could write is the 64 KiB read plus what loopback's
	// socket buffers hold; reading to the end would take the whole timeout.
	if n := written.Load(); took < 0 || took > 5*time.Second || n > 32<<20 {
		t.Fatalf("connection dropped after %v and %d bytes; want within seconds and a few MiB at most", took, n)
	}
	t.Logf("connection dropped %v after the headers, %d KiB written", took.Round(time.Millisecond), written.Load()>>10)
}

func TestHugeRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{MaxRetryAfter: 10 * time.Minute})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Retry-After", "999999999")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	start := time.Now()
	b.publish(t, "e", "t")
	var d tasks.DeliveryRecord
	testkit.Eventually(t, 10*time.Second, "cooling", func() bool {
		var err error
		d, err = b.p.GetDelivery(context.Background(), "s", "e")
		return err == nil && d.State == tasks.StateCooling
	})
	if next := d.NextAttempt.Sub(start); next < 10*time.Minute-time.Second || next > 10*time.Minute+5*time.Second {
		t.Fatalf("next attempt %v out, want the 10m cap", next)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].RetryAfter != "999999999" || d.AttemptCount != 1 {
		t.Fatalf("record %+v; want the one attempt with its raw Retry-After", d)
	}
	if st, err := worker.ReadStats(context.Background(), b.rdb, b.ns, "s"); err != nil || st["failed"] != 0 {
		t.Fatalf("counters %v, %v; want no attempt spent", st, err)
	}
}

// A Retry-After that is neither delay-seconds nor an HTTP-date cannot be
// obeyed: the 429 is a counted failure with backoff, and its attempt says
// the header was ignored, and why.
func TestGarbageRetryAfterIsIgnoredAndSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{BackoffBase: time.Minute, BackoffMax: time.Minute})
	s := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Retry-After", "soon-ish")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	b.put(t, tasks.Subscriber{ID: "s", URL: s.URL})
	b.publish(t, "e", "t")
	// Counted: one attempt spent. The 429 still cools the destination down
	// for the backoff, which the delivery shows (tasks.ParkedState).
	var d tasks.DeliveryRecord
	testkit.Eventually(t, 10*time.Second, "a counted failure, cooling", func() bool {
		var err error
		d, err = b.p.GetDelivery(context.Background(), "s", "e")
		return err == nil && d.AttemptsSpent == 1 && d.State == tasks.StateCooling
	})
	if len(d.Attempts) != 1 || d.Attempts[0].RetryAfter != "soon-ish" ||
		!strings.Contains(d.Attempts[0].Error, `Retry-After "soon-ish" ignored: neither delay-seconds nor an HTTP-date`) {
		t.Fatalf("attempts %+v; want the one, saying its Retry-After was ignored", d.Attempts)
	}
}

// A subscriber that answers every request with 429 Retry-After: 1 gets about
// one request per second — its cooldown holds all its events — while
// another subscriber's events flow.
func TestTooManyRequestsStormStaysInItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t, worker.Config{})
	storm := testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	fast := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "storm", URL: storm.URL, MaxInFlight: 1})
	b.put(t, tasks.Subscriber{ID: "fast", URL: fast.URL, Limit: limits.PerSecond(1000)})
	start := time.Now()
	const n = 50
	for i := range n {
		b.publish(t, fmt.Sprintf("e%d", i), "t")
	}
	testkit.Eventually(t, 10*time.Second, "fast deliveries", func() bool { return fast.Count() == n })
	testkit.Eventually(t, 10*time.Second, "a few storm rounds", func() bool { return storm.Count() >= 3 })
	elapsed := time.Since(start)
	a := storm.Got()
	for i := 1; i < len(a); i++ {
		if gap := a[i].At.Sub(a[i-1].At); gap < time.Second {
			t.Fatalf("storm requests %d and %d only %v apart; Retry-After was 1s", i-1, i, gap)
		}
	}
	if len(a) > int(elapsed.Seconds())+2 {
		t.Fatalf("%d storm requests in %v", len(a), elapsed)
	}
}

// Whatever happens to a delivery, the worker's logs (debug level) and the
// dead-letter ledger never carry a signing secret or the URL's query token.
func TestSecretsStayOutOfLogsAndLedger(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	b := setup(t, worker.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	ok := testkit.NewSink(t, nil)
	bad := testkit.NewSink(t, func(w http.ResponseWriter, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	p, err := deploy.NewRefusingPort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	subs := []tasks.Subscriber{
		b.put(t, tasks.Subscriber{ID: "ok", URL: ok.URL + "?token=hunter2", EventTypes: []string{"a"}}),
		b.put(t, tasks.Subscriber{ID: "bad", URL: bad.URL + "?token=hunter2", EventTypes: []string{"b"}, MaxAttempts: 2}),
		b.put(t, tasks.Subscriber{ID: "down", URL: "http://" + p.Addr + "/?token=hunter2", EventTypes: []string{"c"}, MaxAttempts: 1}),
	}
	for _, typ := range []string{"a", "b", "c"} {
		b.publish(t, "e-"+typ, typ)
	}
	var dl []tasks.DeadLetter
	testkit.Eventually(t, 10*time.Second, "two dead letters and a delivery", func() bool {
		dl = b.dead(t, producer.DeadLetterQuery{})
		return len(dl) == 2 && ok.Count() == 1
	})
	ledger := fmt.Sprintf("%+v", dl)
	for _, s := range subs {
		for _, sec := range s.Secrets {
			if strings.Contains(logs.String(), sec) || strings.Contains(ledger, sec) {
				t.Fatalf("secret of %s found in the logs or the ledger", s.ID)
			}
		}
	}
	if strings.Contains(logs.String(), "hunter2") || strings.Contains(ledger, "hunter2") {
		t.Fatalf("URL token in the logs or ledger:\n%s\n%s", logs.String(), ledger)
	}
	if !strings.Contains(ledger, "REDACTED") {
		t.Fatalf("the refused connection's error should name the redacted URL: %s", ledger)
	}
}
