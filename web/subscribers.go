package web

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// RateLimit is a limit as the API writes it: period as a Go duration. In
// a request, a period left out is DefaultPeriod (given, it may not be "").
type RateLimit struct {
	Rate   int    `json:"rate"`
	Burst  int    `json:"burst"`
	Period string `json:"period"`
}

// DefaultPeriod is a request's rate_limit.period when it is left out: a
// rate is per second unless it says otherwise.
const DefaultPeriod = "1s"

// SubscriberRequest is the body of PUT /v1/subscribers/{id}. A PUT replaces
// the whole subscriber, except that with no secrets a replaced subscriber
// keeps its own (a new one gets a generated secret, shown in the answer
// once), and without paused it keeps its pause as it is, whoever set it.
type SubscriberRequest struct {
	ID           string     `json:"id,omitempty"` // optional; must match the path
	URL          string     `json:"url"`
	EventTypes   []string   `json:"event_types,omitempty"`
	RateLimit    *RateLimit `json:"rate_limit,omitempty"`
	MaxInFlight  *int       `json:"max_in_flight,omitempty"` // absent: tasks.DefaultMaxInFlight
	Secrets      []string   `json:"secrets,omitempty"`
	Paused       *bool      `json:"paused,omitempty"` // absent: unchanged (a new subscriber: not paused)
	MaxAttempts  int        `json:"max_attempts,omitempty"`
	RetryHorizon string     `json:"retry_horizon,omitempty"`
	Region       string     `json:"region,omitempty"`
	// Metrics marks the subscriber for series of its own in /metrics
	// (absent: false; a PUT replaces it like the rest).
	Metrics StrictBool `json:"metrics,omitempty"`
}

// StrictBool is SubscriberRequest.Metrics: true or false, anything else a
// 422 naming the field (null is refused before, by decode).
type StrictBool bool

func (m *StrictBool) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*m = true
	case "false", "null":
		*m = false
	default:
		return &tasks.FieldError{Field: "metrics", Msg: "want true or false, got " + shown(b)}
	}
	return nil
}

// Subscriber is a subscriber as the API shows it. Secrets appear only in
// the answer that generated them.
type Subscriber struct {
	ID            string      `json:"id"`
	URL           string      `json:"url"`
	EventTypes    []string    `json:"event_types"`
	RateLimit     RateLimit   `json:"rate_limit"`
	MaxInFlight   int         `json:"max_in_flight"`
	Paused        bool        `json:"paused"`
	PauseReason   string      `json:"pause_reason,omitempty"` // operator, gone (the endpoint answered 410)
	PausedAt      *time.Time  `json:"paused_at,omitempty"`
	Region        string      `json:"region,omitempty"`
	MaxAttempts   int         `json:"max_attempts,omitempty"`
	RetryHorizon  string      `json:"retry_horizon,omitempty"`
	RetiringUntil []time.Time `json:"retiring_secrets_until,omitempty"`
	Metrics       bool        `json:"metrics"` // marked for series of its own in /metrics
	Secrets       []string    `json:"secrets,omitempty"`
}

func view(s tasks.Subscriber) Subscriber {
	v := Subscriber{
		ID: s.ID, URL: s.URL, EventTypes: s.EventTypes, MaxInFlight: s.MaxInFlight,
		RateLimit: RateLimit{s.Limit.Rate, s.Limit.Burst, isoDuration(s.Limit.Period)},
		Paused:    s.Paused, PauseReason: s.PauseReason, Region: s.Region, MaxAttempts: s.MaxAttempts,
		Metrics: s.Metrics,
	}
	if !s.PausedAt.IsZero() {
		at := s.PausedAt
		v.PausedAt = &at
	}
	if v.EventTypes == nil {
		v.EventTypes = []string{} // all types: [] reads better than null
	}
	if s.RetryHorizon != 0 {
		v.RetryHorizon = isoDuration(time.Duration(s.RetryHorizon))
	}
	now := time.Now()
	for _, r := range s.Retiring {
		if now.Before(r.Until) {
			v.RetiringUntil = append(v.RetiringUntil, r.Until)
		}
	}
	return v
}

func (r *SubscriberRequest) toTask(id string) (tasks.Subscriber, error) {
	if r.ID != "" && r.ID != id {
		return tasks.Subscriber{}, apiErr(http.StatusUnprocessableEntity, "invalid", "id", "body id %q differs from the path's %q", r.ID, id)
	}
	s := tasks.Subscriber{
		ID: id, URL: r.URL, EventTypes: r.EventTypes, Secrets: r.Secrets,
		Paused: r.Paused != nil && *r.Paused, MaxAttempts: r.MaxAttempts, Region: r.Region,
		Metrics: bool(r.Metrics),
	}
	if r.MaxInFlight != nil {
		// 0 is not "the default": leave the field out for that.
		if n := *r.MaxInFlight; n < 1 || n > 10_000 {
			return s, apiErr(http.StatusUnprocessableEntity, "invalid", "max_in_flight",
				"want 1-10000 concurrent requests, got %d (leave max_in_flight out for the default, %d)", n, tasks.DefaultMaxInFlight)
		}
		s.MaxInFlight = *r.MaxInFlight
	}
	if r.RateLimit != nil {
		p, err := parseDuration(cmp.Or(r.RateLimit.Period, DefaultPeriod))
		if err != nil {
			return s, apiErr(http.StatusUnprocessableEntity, "invalid", "rate_limit.period", "want a duration such as PT1S or 1s, PT1M or 1m, got %s", quoted(r.RateLimit.Period))
		}
		s.Limit = limits.Limit{Rate: r.RateLimit.Rate, Burst: r.RateLimit.Burst, Period: p}
		if s.Limit.IsZero() {
			return s, apiErr(http.StatusUnprocessableEntity, "invalid", "rate_limit", "all zero; leave rate_limit out for the default")
		}
	}
	if r.RetryHorizon != "" {
		d, err := parseDuration(r.RetryHorizon)
		if err != nil {
			return s, apiErr(http.StatusUnprocessableEntity, "invalid", "retry_horizon", "want a duration such as PT24H or 24h, P7D or 168h, got %s", quoted(r.RetryHorizon))
		}
		if d < time.Second {
			return s, apiErr(http.StatusUnprocessableEntity, "invalid", "retry_horizon", "want 1s up to 720h (a delivery still failing past it is dead-lettered)")
		}
		s.RetryHorizon = tasks.Duration(d)
	}
	return s, nil
}

func (s *Server) putSubscriber(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return err
	}
	var req SubscriberRequest
	if err := decode(w, r, 64<<10, &req); err != nil {
		return err
	}
	v, created, err := s.saveSubscriber(r.Context(), s.prod(r), id, req)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, v)
	return nil
}

// saveSubscriber is a PUT of subscriber id, for the API and the console's
// forms alike: req checked, the subscriber created or replaced, its pause
// set when req names one. v shows a generated secret, the once it is
// created without one.
func (s *Server) saveSubscriber(ctx context.Context, p *producer.Producer, id string, req SubscriberRequest) (v Subscriber, created bool, err error) {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return v, false, err
	}
	sub, err := req.toTask(id)
	if err != nil {
		return v, false, err
	}
	stored, created, err := p.UpsertSubscriber(ctx, sub)
	if err != nil {
		return v, false, err
	}
	if req.Paused != nil && !created && *req.Paused != stored.Paused {
		if err := p.SetPaused(ctx, id, *req.Paused); err != nil {
			return v, false, err
		}
		if stored, err = p.GetSubscriber(ctx, id); err != nil {
			return v, false, err
		}
	}
	v = view(stored)
	if created && len(req.Secrets) == 0 {
		v.Secrets = stored.Secrets // generated: shown this once
	}
	return v, created, nil
}

func (s *Server) getSubscriber(w http.ResponseWriter, r *http.Request) error {
	sub, err := s.prod(r).GetSubscriber(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(sub))
	return nil
}

// SubscriberPage is the answer of GET /v1/subscribers: up to limit
// subscribers (default 100, at most 1,000) in id order; NextCursor, when
// set, gets the next page (?cursor=). A page costs its size, not the
// number of subscribers.
type SubscriberPage struct {
	Subscribers []Subscriber `json:"subscribers"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

func (s *Server) listSubscribers(w http.ResponseWriter, r *http.Request) error {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "limit", "want a whole number from 1 to 1000, got %s", quoted(v))
		}
		limit = n
	}
	after, err := decodeSubscriberCursor(r.URL.Query().Get("cursor"))
	if err != nil {
		return err
	}
	subs, next, err := s.prod(r).Subscribers(r.Context(), after, limit)
	if err != nil {
		return err
	}
	slices.SortFunc(subs, func(a, b tasks.Subscriber) int { return strings.Compare(a.ID, b.ID) })
	page := SubscriberPage{Subscribers: make([]Subscriber, len(subs))}
	for i, sub := range subs {
		page.Subscribers[i] = view(sub)
	}
	if next != "" {
		page.NextCursor = subscriberCursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// subscriberCursorPrefix marks a subscriber list's cursor, so that another
// list's cursor is refused instead of read as an id.
const subscriberCursorPrefix = "s1."

// decodeSubscriberCursor returns the id a cursor continues after ("" for
// none), or a 422 for a cursor this list did not answer.
func decodeSubscriberCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	bad := apiErr(http.StatusUnprocessableEntity, "invalid", "cursor", "not a cursor of this list: pass next_cursor as it was answered")
	rest, ok := strings.CutPrefix(c, subscriberCursorPrefix)
	if !ok {
		return "", bad
	}
	id, err := base64.RawURLEncoding.DecodeString(rest)
	// A page may end at a subscriber stored before "." and ".." were refused.
	if err != nil || tasks.ValidateStoredSubscriberID(string(id)) != nil {
		return "", bad
	}
	return string(id), nil
}

func (s *Server) deleteSubscriber(w http.ResponseWriter, r *http.Request) error {
	if err := s.prod(r).DeleteSubscriber(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) error { return s.setPaused(w, r, true) }
func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, false)
}

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	if err := s.prod(r).SetPaused(r.Context(), r.PathValue("id"), paused); err != nil {
		return err
	}
	return s.getSubscriber(w, r)
}

// RotateRequest is the optional body of POST /v1/subscribers/{id}/secrets/rotate.
type RotateRequest struct {
	// Grace is how long the old secrets keep signing beside the new one:
	// 1m up to 720h, default 24h; "0s" stops them at once (a leaked
	// secret). See producer.MinGrace.
	Grace string `json:"grace,omitempty"`
}

// DefaultGrace is how long a rotated-out secret keeps signing.
const DefaultGrace = 24 * time.Hour

func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	var req RotateRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, 4<<10, &req); err != nil {
			return err
		}
	}
	grace := DefaultGrace
	if req.Grace != "" {
		d, err := parseDuration(req.Grace)
		if err != nil {
			return apiErr(http.StatusUnprocessableEntity, "invalid", "grace", "want a duration such as PT24H or 24h, or PT0S (0s) to stop the old secrets now, got %s", quoted(req.Grace))
		}
		grace = d
	}
	sub, secret, err := s.prod(r).RotateSecret(r.Context(), r.PathValue("id"), grace)
	if err != nil {
		return err
	}
	v := view(sub)
	v.Secrets = []string{secret} // shown this once
	writeJSON(w, http.StatusOK, v)
	return nil
}
