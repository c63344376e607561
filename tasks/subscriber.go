package tasks

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hooklane/hooklane/limits"
)

// Subscriber is a destination: one endpoint with its own secrets, filter and
// limits. Its id keys every per-destination gate.
type Subscriber struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Secrets sign each request, one webhook-signature entry per secret, in
	// Standard Webhooks form: "whsec_" + base64 of 24-64 random bytes. Several
	// are active while a secret is being rotated. Generated when empty.
	Secrets []string `json:"secrets"`
	// Retiring are secrets replaced by a rotation that still sign requests
	// until their grace period ends, so a receiver can switch to the new
	// secret without refusing a single request. See SigningSecrets.
	Retiring []RetiringSecret `json:"retiring,omitempty"`
	// EventTypes filters events: exact names or "prefix.*". Empty matches all.
	EventTypes []string `json:"event_types"`
	// Limit is the destination's rate limit. Default limits.DefaultLimit.
	Limit limits.Limit `json:"limit"`
	// MaxInFlight caps concurrent requests to the endpoint. Default 10.
	MaxInFlight int `json:"max_in_flight"`
	// Region confines the subscriber's deliveries to workers of that region
	// (HOOKLANE_REGIONS); empty: any worker.
	Region string `json:"region,omitempty"`
	// Gen is the subscriber's generation, new each time its id is created:
	// the tasks of a deleted subscriber are dropped, never sent to a new
	// one of the same id. Set by the producer.
	Gen string `json:"gen,omitempty"`

	// Paused subscribers get no new events from Publish and their queued
	// events are held. The pause lives in the gate record, not in the
	// stored configuration: the SDK's SetPaused and the API's pause and
	// resume change it, a 410 Gone from the endpoint sets it.
	Paused bool `json:"-"`
	// PauseReason says who paused it: "operator", or "gone" when the
	// endpoint answered 410.
	PauseReason string    `json:"-"`
	PausedAt    time.Time `json:"-"`
	// MaxAttempts overrides the producer's default (8) for events published
	// from now on.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// RetryHorizon overrides the producer's default (24h) for events
	// published from now on.
	RetryHorizon Duration `json:"retry_horizon,omitzero"`
	// Metrics marks the subscriber for series of its own in /metrics (an
	// operator's choice, for the few worth watching one by one; every
	// subscriber counts in the aggregate series). The web process exports
	// at most HOOKLANE_METRICS_MAX_SUBSCRIBERS of them.
	Metrics bool `json:"metrics,omitempty"`
}

// RetiringSecret is a secret that signs until Until and then never again.
type RetiringSecret struct {
	Secret string    `json:"secret"`
	Until  time.Time `json:"until"`
}

// MaxSecrets caps Secrets and Retiring together: each one is a signature in
// every request's header.
const MaxSecrets = 10

// SigningSecrets returns the secrets that sign a request sent at now:
// Secrets, then the retiring secrets whose grace has not ended.
func (s *Subscriber) SigningSecrets(now time.Time) []string {
	out := append([]string(nil), s.Secrets...)
	for _, r := range s.Retiring {
		if now.Before(r.Until) {
			out = append(out, r.Secret)
		}
	}
	return out
}

// DefaultMaxInFlight applies when Subscriber.MaxInFlight is 0.
const DefaultMaxInFlight = 10

// Duration is a time.Duration that reads and writes JSON as "90s".
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string; its error says so in words, not
// in encoding/json's or time.ParseDuration's.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) != nil {
		return fmt.Errorf("want a duration such as 90s or 24h, got %.40s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 90s or 24h, got %.40q", s)
	}
	*d = Duration(v)
	return nil
}

// WithDefaults fills unset fields and generates a secret when none is given.
func (s Subscriber) WithDefaults() (Subscriber, error) {
	if s.Limit.IsZero() {
		s.Limit = limits.DefaultLimit
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if len(s.Secrets) == 0 {
		sec, err := NewSecret()
		if err != nil {
			return s, err
		}
		s.Secrets = []string{sec}
	}
	return s, nil
}

// Validate names the first field that is wrong.
func (s *Subscriber) Validate() error {
	if err := ValidateSubscriberID(s.ID); err != nil {
		return err
	}
	if err := ValidateURL(s.URL); err != nil {
		return err
	}
	if len(s.Secrets) == 0 || len(s.Secrets)+len(s.Retiring) > MaxSecrets {
		return invalid("secrets", "want 1-%d secrets, retiring ones included", MaxSecrets)
	}
	for _, sec := range s.Secrets {
		if err := ValidateSecret(sec); err != nil {
			return err
		}
	}
	for _, r := range s.Retiring {
		if ValidateSecret(r.Secret) != nil {
			return invalid("retiring", "want whsec_ + base64 of 24-64 bytes")
		}
	}
	if len(s.EventTypes) > 100 {
		return invalid("event_types", "at most 100 entries")
	}
	for _, p := range s.EventTypes {
		base := strings.TrimSuffix(p, ".*")
		if base == "" || len(p) > 128 || !idChars(base, false) {
			return invalid("event_types", "%q: want an event type or prefix.*", p)
		}
	}
	if err := s.Limit.Validate(); err != nil {
		// limits names the field as "limit.rate: ..."; keep it dotted.
		field, msg, ok := strings.Cut(err.Error(), ": ")
		if !ok {
			field, msg = "limit", err.Error()
		}
		return invalid(field, "%s", msg)
	}
	if s.MaxInFlight < 1 || s.MaxInFlight > 10_000 {
		return invalid("max_in_flight", "want 1-10000")
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > 100 {
		return invalid("max_attempts", "want 0 (default) or 1-100")
	}
	if s.RetryHorizon < 0 || s.RetryHorizon > 0 && time.Duration(s.RetryHorizon) < time.Second || time.Duration(s.RetryHorizon) > 30*24*time.Hour {
		return invalid("retry_horizon", "want 0s (the default) or 1s up to 720h")
	}
	if s.Region != "" {
		if err := ValidateRegion(s.Region); err != nil {
			return err
		}
	}
	return nil
}

// ValidateRegion accepts 1-32 characters of a-z 0-9 -: a region names
// asynq queues and HOOKLANE_REGIONS entries.
func ValidateRegion(r string) error {
	ok := r != "" && len(r) <= 32
	for i := 0; ok && i < len(r); i++ {
		c := r[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return invalid("region", "want 1-32 characters of a-z 0-9 -")
	}
	return nil
}

// Pause reasons, as the gate record keeps them.
const (
	PauseOperator = "operator" // SetPaused, the API's pause
	PauseGone     = "gone"     // the endpoint answered 410 Gone
	PauseFailing  = "failing"  // disabled: the endpoint failed without a break for the breaker's DisableAfter
)

// ValidateURL accepts absolute http and https URLs with a host and no
// credentials (they would be logged and shown in the UI).
func ValidateURL(raw string) error {
	if len(raw) > 2048 {
		return invalid("url", "longer than 2048 bytes")
	}
	u, err := url.Parse(raw)
	var uerr *url.Error
	switch {
	case errors.As(err, &uerr):
		// url.Parse's reason, without its quote of the whole URL and its
		// package name.
		return invalid("url", "not a valid URL (%s): want an absolute http or https URL such as https://example.com/hooks",
			strings.TrimPrefix(uerr.Err.Error(), "net/url: "))
	case err != nil:
		return invalid("url", "not a valid URL: want an absolute http or https URL such as https://example.com/hooks")
	case u.Scheme != "http" && u.Scheme != "https":
		return invalid("url", "want an absolute http or https URL such as https://example.com/hooks")
	case u.Hostname() == "":
		return invalid("url", "missing host")
	case u.User != nil:
		return invalid("url", "credentials in the URL are not allowed; use the signature")
	case u.Fragment != "":
		return invalid("url", "fragments are not sent; remove #%s", u.Fragment)
	}
	return nil
}

// ValidateSecret checks the Standard Webhooks secret form.
func ValidateSecret(sec string) error {
	raw, ok := strings.CutPrefix(sec, "whsec_")
	if !ok {
		return invalid("secrets", "a secret must start with whsec_")
	}
	// The decoder skips line breaks; a secret has none (its form is one
	// pattern in openapi.json).
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(b) < 24 || len(b) > 64 || strings.ContainsAny(raw, "\r\n") {
		return invalid("secrets", "want whsec_ + base64 of 24-64 bytes")
	}
	return nil
}

// NewSecret returns a fresh whsec_ secret of 32 random bytes.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:]), nil
}

// Matches reports whether the subscriber wants events of type t. Without
// a filter it wants every type but hooklane's operator events
// (OperatorPrefix), which go only to those that name them.
func (s *Subscriber) Matches(t string) bool {
	if len(s.EventTypes) == 0 {
		return !IsOperatorType(t)
	}
	for _, p := range s.EventTypes {
		if p == t {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(t, prefix) {
			return true
		}
	}
	return false
}
