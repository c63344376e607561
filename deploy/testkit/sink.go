package testkit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// Arrival is one request a Sink received.
type Arrival struct {
	N      int // 0-based index in arrival order
	At     time.Time
	ID     string // webhook-id header
	Header http.Header
	Body   []byte
	// Accepted: the endpoint took the event (answered 2xx, or acted on it
	// before the connection went away; see NewReceiver).
	Accepted bool
}

// Sink is an HTTP endpoint on 127.0.0.1 that records every request.
type Sink struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []Arrival
}

// NewSink answers the n-th request (0-based) with respond, 200 when nil,
// and counts a 2xx answer as accepted. It closes when the test ends.
func NewSink(t testing.TB, respond func(w http.ResponseWriter, n int)) *Sink {
	return newSink(t, func(w http.ResponseWriter, _ *http.Request, a *Arrival) bool {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		if respond != nil {
			respond(sw, a.N)
		}
		return sw.status/100 == 2
	})
}

// NewReceiver lets handle answer each request and say whether the event
// was accepted: a receiver that acts on an event and then never answers
// (the worker is killed meanwhile) accepted it all the same.
func NewReceiver(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, id string) bool) *Sink {
	return newSink(t, func(w http.ResponseWriter, r *http.Request, a *Arrival) bool { return handle(w, r, a.ID) })
}

func newSink(t testing.TB, handle func(http.ResponseWriter, *http.Request, *Arrival) bool) *Sink {
	s := &Sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a := Arrival{At: time.Now(), ID: r.Header.Get("webhook-id"), Header: r.Header.Clone(), Body: body}
		s.mu.Lock()
		a.N = len(s.arrivals)
		s.arrivals = append(s.arrivals, a)
		s.mu.Unlock()
		ok := handle(w, r, &a)
		s.mu.Lock()
		s.arrivals[a.N].Accepted = ok
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

// Got returns a copy of the arrivals so far, in arrival order.
func (s *Sink) Got() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.arrivals)
}

// Count is the number of requests so far.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.arrivals)
}

// Close stops the server and drops its client's idle connections.
func (s *Sink) Close() {
	s.Server.Close()
	s.Server.Client().CloseIdleConnections()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (hijacking).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Loopback allows the tests' sinks (on 127.0.0.1 or ::1) past the SSRF
// guard: give it as AllowedCIDRs to the workers and producers of a test.
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
