package dev

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/web/cli"
)

// Receiver is the demo's webhook receiver on 127.0.0.1: /fast answers 200
// at once; /limited takes Limit requests per second and answers the rest
// 429 with a Retry-After, as a real rate-limited endpoint does. DownURL
// points at a port nothing listens on.
type Receiver struct {
	URL     string // http://127.0.0.1:port
	DownURL string
	down    *deploy.RefusingPort
	Limit   int
	// RetryAfter is what /limited asks for when over its limit, in seconds.
	RetryAfter int

	Fast, Limited, Throttled atomic.Int64

	srv *http.Server
	mu  sync.Mutex
	// a token bucket of Limit per second, burst Limit
	tokens float64
	last   time.Time
}

// StartReceiver starts a Receiver taking limit requests per second on /limited.
func StartReceiver(limit int) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// Bound but never listening: connections are refused, like a service that is down.
	down, err := deploy.NewRefusingPort()
	if err != nil {
		ln.Close()
		return nil, err
	}
	r := &Receiver{URL: "http://" + ln.Addr().String(), DownURL: "http://" + down.Addr + "/hooks", down: down,
		Limit: limit, RetryAfter: 3, tokens: float64(limit), last: time.Now()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fast", func(w http.ResponseWriter, _ *http.Request) { r.Fast.Add(1) })
	mux.HandleFunc("POST /limited", func(w http.ResponseWriter, _ *http.Request) {
		if !r.take() {
			r.Throttled.Add(1)
			w.Header().Set("Retry-After", strconv.Itoa(r.RetryAfter))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		r.Limited.Add(1)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *Receiver) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.tokens = min(float64(r.Limit), r.tokens+now.Sub(r.last).Seconds()*float64(r.Limit))
	r.last = now
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}

// Close stops the receiver.
func (r *Receiver) Close() error { r.down.Close(); return r.srv.Close() }

// DemoSubscribers are the demo's three subscribers: one fast, one that
// enforces its own lower limit with 429 + Retry-After (hooklane is told it
// may send 10/s, so it finds out from the answers), and one that is down:
// the events that fail before its circuit breaker opens dead-letter (one
// attempt each), the rest are held while the breaker probes.
func DemoSubscribers(r *Receiver) map[string]web.SubscriberRequest {
	return map[string]web.SubscriberRequest{
		"demo-fast": {URL: r.URL + "/fast", EventTypes: []string{"demo.*"},
			RateLimit: &web.RateLimit{Rate: 50, Burst: 50, Period: "1s"}},
		"demo-limited": {URL: r.URL + "/limited", EventTypes: []string{"demo.*"},
			RateLimit: &web.RateLimit{Rate: 10, Burst: 10, Period: "1s"}},
		"demo-down": {URL: r.DownURL, EventTypes: []string{"demo.*"}, MaxAttempts: 1},
	}
}

// Demo puts the demo subscribers through the API and publishes a burst of n
// events, plus a few due later (asynqmon's Scheduled tab). Event ids carry
// the run's start time, so each run delivers anew instead of being
// deduplicated against the last one.
func Demo(ctx context.Context, c *cli.Client, r *Receiver, n int) error {
	for id, s := range DemoSubscribers(r) {
		if _, err := c.PutSubscriber(ctx, id, s); err != nil {
			return fmt.Errorf("demo: put %s: %w", id, err)
		}
	}
	run := time.Now().UTC().Format("150405")
	later := time.Now().Add(90 * time.Second)
	for i := range n + 3 {
		ev := web.EventRequest{ID: fmt.Sprintf("demo-%s-%03d", run, i), Type: "demo.order.created",
			Data: json.RawMessage(fmt.Sprintf(`{"order":%d,"total_cents":%d}`, i, 1000+37*i))}
		if i >= n {
			ev.Type, ev.NotBefore = "demo.reminder.due", &later
		}
		if _, err := c.Publish(ctx, ev); err != nil {
			return fmt.Errorf("demo: publish %s: %w", ev.ID, err)
		}
	}
	return nil
}
