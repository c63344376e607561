package loadtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/deploy"
)

// Kind is an endpoint's behaviour.
type Kind string

const (
	Fast          Kind = "fast"           // 200 at once
	Slow          Kind = "slow"           // 200 after Delay
	RateEnforcing Kind = "rate_enforcing" // own token bucket; 429 + Retry-After; bans early callers
	Flaky         Kind = "flaky"          // a share of 5xx and connection resets, else 200
	Down          Kind = "down"           // connection refused for the whole run
	Gone          Kind = "gone"           // 410
)

// Endpoint describes one subscriber endpoint hosted by a Receiver. Zero
// fields take the defaults named.
type Endpoint struct {
	ID   string
	Kind Kind
	// Delay is how long a Slow endpoint takes to answer.
	Delay time.Duration
	// Rate (per second) and Burst are a RateEnforcing endpoint's own token
	// bucket: at most Burst + Rate·t requests in any window get a 200.
	Rate  float64
	Burst int
	// RetryAfter is what a 429 asks for. Default 1s. With HTTPDate the
	// header is an HTTP-date (rounded up to the next whole second, so it
	// never asks for less than RetryAfter), else delta-seconds.
	RetryAfter time.Duration
	HTTPDate   bool
	// BanFor is how long a sender that calls before the Retry-After
	// deadline gets 403s, like the partner in seed 000. Default 60s.
	BanFor time.Duration
	// Grace forgives requests that arrive this soon after a 429 was
	// written: they were in flight on other connections before the sender
	// could have read the 429 (MaxInFlight > 1). They are counted as
	// Overlap and answered 429, not banned. Default 50ms.
	Grace time.Duration
	// FailShare and ResetShare are a Flaky endpoint's shares of 5xx
	// answers and of connections reset without an answer.
	FailShare, ResetShare float64
	// DownFor keeps the endpoint's port closed (connection refused) for
	// this long after Add, then serves as Kind says.
	DownFor time.Duration
	// Secrets verify each request's webhook-signature (Standard Webhooks).
	// Empty: no check (the floor's unsigned requests).
	Secrets []string
}

func (e Endpoint) withDefaults() Endpoint {
	e.RetryAfter = cmp.Or(e.RetryAfter, time.Second)
	e.BanFor = cmp.Or(e.BanFor, time.Minute)
	e.Grace = cmp.Or(e.Grace, 50*time.Millisecond)
	return e
}

func (e Endpoint) validate() error {
	switch {
	case e.ID == "":
		return errors.New("loadtest: Endpoint.ID is required")
	case e.Kind == RateEnforcing && (e.Rate <= 0 || e.Burst < 1):
		return fmt.Errorf("loadtest: endpoint %s: Rate and Burst must be positive", e.ID)
	case e.Kind == Slow && e.Delay <= 0:
		return fmt.Errorf("loadtest: endpoint %s: Delay must be positive", e.ID)
	case e.FailShare < 0 || e.ResetShare < 0 || e.FailShare+e.ResetShare > 1:
		return fmt.Errorf("loadtest: endpoint %s: FailShare+ResetShare must be within [0, 1]", e.ID)
	}
	switch e.Kind {
	case Fast, Slow, RateEnforcing, Flaky, Down, Gone:
		return nil
	}
	return fmt.Errorf("loadtest: endpoint %s: unknown kind %q", e.ID, e.Kind)
}

// Arrival is one request an endpoint received.
type Arrival struct {
	At     time.Time
	ID     string // webhook-id header
	Status int    // what the endpoint answered; 0 for a reset connection
	SigOK  bool   // signature verified (always true when the endpoint has no secrets)
}

// EndpointStats counts what an endpoint did besides recording arrivals.
// The counters that say the adversary acted (Throttled, RetryAfterSent,
// Armed, Resets, Failed, Gone, UpAt) are what makes a zero elsewhere mean
// something: "0 early" from an endpoint that never answered 429 proves
// nothing.
type EndpointStats struct {
	Throttled      int // 429s answered after the bucket ran dry
	RetryAfterSent int // 429s answered with a Retry-After header (Throttled and Overlap)
	// Armed counts the Retry-After deadlines set while a ban was
	// configured: each made coming back before it a ban.
	Armed       int
	BanFor      time.Duration // the ban an early caller gets (RateEnforcing only)
	Early       int           // requests after the grace and before a Retry-After deadline: each starts a ban
	Overlap     int           // requests within Grace of a 429 (in flight before the sender could know)
	Bans        int           // bans started (equal to Early)
	Banned      int           // requests answered 403 while banned
	BadSig      int           // requests whose signature did not verify
	Resets      int           // connections reset by a Flaky endpoint
	Failed      int           // 5xx answered by a Flaky endpoint
	Gone        int           // 410s answered by a Gone endpoint
	UpAt        time.Time     `json:",omitzero"`  // when a DownFor endpoint started listening
	RelistenErr string        `json:",omitempty"` // a DownFor endpoint could not take its port back
}

type endpoint struct {
	spec Endpoint
	url  string
	port int
	whs  []*standardwebhooks.Webhook
	// refusing holds the port while the endpoint is down.
	refusing *deploy.RefusingPort

	mu          sync.Mutex
	rng         *rand.Rand
	tokens      float64
	refilled    time.Time
	deadline    time.Time   // current Retry-After deadline
	throttledAt time.Time   // when the 429 that set deadline was answered
	retryAfter  string      // header value of that 429
	deadlines   []time.Time // every deadline set, one per Throttled
	banUntil    time.Time
	arrivals    []Arrival
	stats       EndpointStats
}

// Receiver hosts endpoints on 127.0.0.1, each on its own port so that each
// is a separate destination to the sender's connection pool, as real
// subscribers are.
type Receiver struct {
	log *slog.Logger

	mu      sync.Mutex
	eps     map[string]*endpoint
	servers []*http.Server
	timers  []*time.Timer
	closed  bool
}

// NewReceiver returns an empty receiver; Add endpoints to it.
func NewReceiver(log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.Default()
	}
	return &Receiver{log: log, eps: map[string]*endpoint{}}
}

// Add starts serving e and returns its URL. A Down endpoint, or one with
// DownFor, gets the URL of a port that was opened and closed again, so
// that connecting to it is refused.
func (r *Receiver) Add(e Endpoint) (string, error) {
	e = e.withDefaults()
	if err := e.validate(); err != nil {
		return "", err
	}
	ep := &endpoint{spec: e, tokens: float64(e.Burst), refilled: time.Now(), rng: rand.New(rand.NewPCG(seed(e.ID), 1))}
	if e.Kind == RateEnforcing {
		ep.stats.BanFor = e.BanFor
	}
	for _, s := range e.Secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			return "", fmt.Errorf("loadtest: endpoint %s: secret: %w", e.ID, err)
		}
		ep.whs = append(ep.whs, wh)
	}
	// A down endpoint holds its port bound but not listening: connections
	// are refused, and no other endpoint can be given the port meanwhile.
	var l net.Listener
	var err error
	if e.Kind == Down || e.DownFor > 0 {
		if ep.refusing, err = deploy.NewRefusingPort(); err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(ep.refusing.Addr)
		ep.port, _ = strconv.Atoi(port)
	} else {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return "", err
		}
		ep.port = l.Addr().(*net.TCPAddr).Port
	}
	ep.url = fmt.Sprintf("http://127.0.0.1:%d/hooks/%s", ep.port, e.ID)

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.eps[e.ID]; dup || r.closed {
		if l != nil {
			l.Close()
		}
		if ep.refusing != nil {
			ep.refusing.Close()
		}
		return "", fmt.Errorf("loadtest: endpoint %s: duplicate id or receiver closed", e.ID)
	}
	r.eps[e.ID] = ep
	switch {
	case e.Kind == Down:
	case e.DownFor > 0:
		r.timers = append(r.timers, time.AfterFunc(e.DownFor, func() { r.relisten(ep) }))
	default:
		r.serve(ep, l)
	}
	return ep.url, nil
}

// serve must be called with r.mu held.
func (r *Receiver) serve(ep *endpoint, l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(ep.handle), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	r.servers = append(r.servers, srv)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("receiver endpoint stopped", "endpoint", ep.spec.ID, "err", err)
		}
	}()
}

// relisten brings a DownFor endpoint up on the port its URL names.
func (r *Receiver) relisten(ep *endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ep.release() // frees the port for the listener right below
	if r.closed {
		return
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ep.port)))
	if err != nil {
		// Another process took the port in the meantime; the endpoint stays
		// down and the report says why.
		ep.mu.Lock()
		ep.stats.RelistenErr = err.Error()
		ep.mu.Unlock()
		r.log.Error("endpoint could not come back up", "endpoint", ep.spec.ID, "err", err)
		return
	}
	ep.mu.Lock()
	ep.stats.UpAt = time.Now()
	ep.mu.Unlock()
	r.serve(ep, l)
}

// release frees a down endpoint's port once; r.mu must be held.
func (ep *endpoint) release() {
	if ep.refusing != nil {
		ep.refusing.Close()
		ep.refusing = nil
	}
}

// Close stops every endpoint.
func (r *Receiver) Close() {
	r.mu.Lock()
	r.closed = true
	for _, t := range r.timers {
		t.Stop()
	}
	for _, ep := range r.eps {
		ep.release()
	}
	servers := r.servers
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		if s.Shutdown(ctx) != nil {
			s.Close()
		}
	}
}

// Arrivals returns a copy of the endpoint's arrivals, in arrival order.
func (r *Receiver) Arrivals(id string) []Arrival {
	ep := r.get(id)
	if ep == nil {
		return nil
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return append([]Arrival(nil), ep.arrivals...)
}

// Deadlines returns the Retry-After deadlines the endpoint set, in order.
func (r *Receiver) Deadlines(id string) []time.Time {
	ep := r.get(id)
	if ep == nil {
		return nil
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return append([]time.Time(nil), ep.deadlines...)
}

// Count is the number of arrivals so far, cheaply.
func (r *Receiver) Count(id string) int {
	ep := r.get(id)
	if ep == nil {
		return 0
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.arrivals)
}

// Stats returns the endpoint's counters.
func (r *Receiver) Stats(id string) EndpointStats {
	ep := r.get(id)
	if ep == nil {
		return EndpointStats{}
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.stats
}

// URL returns the endpoint's URL.
func (r *Receiver) URL(id string) string {
	if ep := r.get(id); ep != nil {
		return ep.url
	}
	return ""
}

func (r *Receiver) get(id string) *endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eps[id]
}

const maxBody = 1 << 20

func (ep *endpoint) handle(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	body, _ := io.ReadAll(io.LimitReader(req.Body, maxBody))
	sigOK := len(ep.whs) == 0
	for _, wh := range ep.whs {
		if wh.Verify(body, req.Header) == nil {
			sigOK = true
			break
		}
	}
	ep.mu.Lock()
	status, retryAfter, reset := ep.decide(now)
	if reset {
		status = 0
	}
	// Counted by what is answered, not by why: these prove the adversary acted.
	switch {
	case status == http.StatusTooManyRequests && retryAfter != "":
		ep.stats.RetryAfterSent++
	case status == http.StatusGone:
		ep.stats.Gone++
	}
	ep.arrivals = append(ep.arrivals, Arrival{At: now, ID: req.Header.Get("webhook-id"), Status: status, SigOK: sigOK})
	if !sigOK {
		ep.stats.BadSig++
	}
	ep.mu.Unlock()

	if reset {
		resetConn(w)
		return
	}
	if ep.spec.Kind == Slow {
		time.Sleep(ep.spec.Delay)
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
}

// decide picks the answer to a request arriving at now. Called with ep.mu held.
func (ep *endpoint) decide(now time.Time) (status int, retryAfter string, reset bool) {
	s := &ep.spec
	switch s.Kind {
	case Gone:
		return http.StatusGone, "", false
	case Flaky:
		x := ep.rng.Float64()
		switch {
		case x < s.ResetShare:
			ep.stats.Resets++
			return 0, "", true
		case x < s.ResetShare+s.FailShare:
			ep.stats.Failed++
			return []int{500, 502, 503}[ep.rng.IntN(3)], "", false
		}
		return http.StatusOK, "", false
	case RateEnforcing:
		return ep.enforce(now)
	}
	return http.StatusOK, "", false
}

// enforce is the partner of seed 000: a token bucket, a 429 with
// Retry-After when it is dry, and a ban for whoever comes back early.
func (ep *endpoint) enforce(now time.Time) (int, string, bool) {
	s := &ep.spec
	switch {
	case now.Before(ep.banUntil):
		ep.stats.Banned++
		return http.StatusForbidden, "", false
	case now.Before(ep.deadline) && now.Sub(ep.throttledAt) <= s.Grace:
		ep.stats.Overlap++
		return http.StatusTooManyRequests, ep.retryAfter, false
	case now.Before(ep.deadline):
		ep.stats.Early++
		ep.stats.Bans++
		ep.banUntil = now.Add(s.BanFor)
		return http.StatusForbidden, "", false
	}
	ep.tokens = math.Min(float64(s.Burst), ep.tokens+now.Sub(ep.refilled).Seconds()*s.Rate)
	ep.refilled = now
	if ep.tokens >= 1 {
		ep.tokens--
		return http.StatusOK, "", false
	}
	ep.stats.Throttled++
	ep.throttledAt = now
	if s.HTTPDate {
		// An HTTP-date has whole seconds: round up so it never asks for less.
		ep.deadline = now.Add(s.RetryAfter).Add(time.Second - 1).Truncate(time.Second)
		ep.retryAfter = ep.deadline.UTC().Format(http.TimeFormat)
	} else {
		secs := int(math.Ceil(s.RetryAfter.Seconds()))
		ep.deadline = now.Add(time.Duration(secs) * time.Second)
		ep.retryAfter = strconv.Itoa(secs)
	}
	if s.BanFor > 0 && ep.deadline.After(now) {
		ep.stats.Armed++
	}
	ep.deadlines = append(ep.deadlines, ep.deadline)
	return http.StatusTooManyRequests, ep.retryAfter, false
}

// resetConn closes the connection with RST and no answer, as a crashed
// or overloaded proxy does.
func resetConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

func seed(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}
