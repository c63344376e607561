package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// TypeDeliver is the asynq task type of one event bound for one subscriber.
const TypeDeliver = "webhook:deliver"

// MaxDataSize is the default cap on an event's data.
const MaxDataSize = 256 << 10

// Event is what an app publishes and what a subscriber receives as the JSON
// request body: Standard Webhooks' recommended {type, timestamp, data}, plus
// the id that also travels as the webhook-id header.
type Event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// ErrInvalid marks a value that failed validation; the message names the field.
var ErrInvalid = errors.New("invalid")

// FieldError is a validation error about one field. It matches ErrInvalid
// with errors.Is; the HTTP API reads Field from it with errors.As.
type FieldError struct {
	Field string // JSON name, dotted for nested fields ("limit.rate")
	Msg   string
}

func (e *FieldError) Error() string { return "invalid: " + e.Field + ": " + e.Msg }
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the event's id, type and data (not its size: see MaxDataSize).
// OperatorPrefix starts the types of hooklane's own events: operator
// events (the Operator* types) and the test ping. Apps may not publish
// them; subscribers get them only by naming them in their filter
// ("hooklane.*" or a type).
const OperatorPrefix = "hooklane."

// Operator event types: a destination's breaker opened (failing), closed
// (recovered), it was disabled after failing without a break, and dead
// letters (batched, at most one event per subscriber per minute).
const (
	OperatorFailing   = "hooklane.subscriber.failing"
	OperatorRecovered = "hooklane.subscriber.recovered"
	OperatorDisabled  = "hooklane.subscriber.disabled"
	OperatorDead      = "hooklane.delivery.dead"
)

// IsOperatorType reports whether t is one of hooklane's own types.
func IsOperatorType(t string) bool { return strings.HasPrefix(t, OperatorPrefix) }

func (e *Event) Validate() error { return e.validate(ValidateEventID) }

// validate is Validate with the id checked by validID: ValidateEventID for
// a new event, validStoredEventID for one published before.
func (e *Event) validate(validID func(string) error) error {
	if err := validID(e.ID); err != nil {
		return err
	}
	if e.Type == "" || len(e.Type) > 128 || !idChars(e.Type, false) {
		return invalid("type", "want 1-128 characters of A-Z a-z 0-9 . _ - :")
	}
	if len(e.Data) == 0 {
		return invalid("data", "required (use null for none)")
	}
	if !json.Valid(e.Data) {
		return invalid("data", "not valid JSON")
	}
	return nil
}

// ValidateEventID accepts 1-128 characters of A-Z a-z 0-9 . _ - : ~,
// except "." and "..": URL path cleaning changes those (GET
// /v1/events/.. is GET /v1/), so the API could not address the event.
func ValidateEventID(id string) error {
	if err := validStoredEventID(id); err != nil {
		return err
	}
	if isDotSegment(id) {
		return invalid("id", "%q is not an id: URL path cleaning would remove it; want 1-128 characters of A-Z a-z 0-9 . _ - : ~, not . or ..", id)
	}
	return nil
}

// validStoredEventID is the check event ids were published under before
// "." and ".." were refused: a task queued then is still delivered.
func validStoredEventID(id string) error {
	if id == "" || len(id) > 128 || !idChars(id, true) {
		return invalid("id", "want 1-128 characters of A-Z a-z 0-9 . _ - : ~")
	}
	return nil
}

// ValidateSubscriberID accepts 1-64 characters of A-Z a-z 0-9 . _ -; no colon,
// so that TaskID can be split unambiguously; and not "." or "..", which URL
// path cleaning changes (/v1/subscribers/.. is /v1/), so that the API can
// address every subscriber it creates.
func ValidateSubscriberID(id string) error {
	if err := ValidateStoredSubscriberID(id); err != nil {
		return err
	}
	if isDotSegment(id) {
		return invalid("subscriber_id", "%q is not an id: URL path cleaning would remove it; want 1-64 characters of A-Z a-z 0-9 . _ -, not . or ..", id)
	}
	return nil
}

// ValidateStoredSubscriberID is the check subscriber ids were created under
// before "." and ".." were refused (ValidateSubscriberID): it accepts every
// id a subscriber, its tasks and its dead letters may be stored under. For
// reading and deleting what exists, never for creating.
func ValidateStoredSubscriberID(id string) error {
	if id == "" || len(id) > 64 || !idChars(id, false) || containsColon(id) {
		return invalid("subscriber_id", "want 1-64 characters of A-Z a-z 0-9 . _ -")
	}
	return nil
}

// isDotSegment reports whether id is a path segment that URL path cleaning
// removes.
func isDotSegment(id string) bool { return id == "." || id == ".." }

func containsColon(s string) bool { return strings.IndexByte(s, ':') >= 0 }

func idChars(s string, tilde bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == ':' || (tilde && c == '~')
		if !ok {
			return false
		}
	}
	return true
}

// TaskID is the asynq task id of event eventID bound for subscriber sub. asynq
// refuses a second task with the same id while the first exists, including
// for its Retention after completion: that is hooklane's deduplication.
func TaskID(sub, eventID string) string { return sub + ":" + eventID }

// SplitTaskID is TaskID's inverse (a subscriber id has no colon). It takes
// any subscriber id a task may have been stored under, so that a dead
// letter's keys (Keys.Ledger) stay where they were written.
func SplitTaskID(id string) (sub, eventID string, ok bool) {
	sub, eventID, ok = strings.Cut(id, ":")
	return sub, eventID, ok && ValidateScopedID(sub) == nil && eventID != ""
}

// TaskVersion is the payload version this release writes. Version 3 is a
// pointer to the delivery record, nothing more: {"v":3,"subscriber_id",
// "event_id"}. Version 2 (the release before) carried the event's type,
// times and attempt budget (LegacyDelivery); a worker of this release
// adopts such a task into its subscriber's schedule instead of delivering
// it (worker/legacy.go). A version above TaskVersion is a later release's:
// DecodeTask answers ErrNewerTask, and the worker puts it back unsent.
const TaskVersion = 3

// ErrNewerTask marks a task of a payload version this release does not
// know (a later release's, during a rolling deploy or after a rollback).
var ErrNewerTask = errors.New("task of a newer release")

// Delivery is the payload of a TypeDeliver task: which delivery record to
// run. Everything else about the delivery (its generation, due time,
// horizon, attempts) is in that record (Keys.Delivery), its one owner, and
// the event in the stored event (Keys.Event): the worker reads both when
// it runs the task, so a rotated secret, a new URL or a pause applies to
// queued events too, and no task carries a copy that could go stale.
type Delivery struct {
	V            int    `json:"v"`
	SubscriberID string `json:"subscriber_id"`
	EventID      string `json:"event_id,omitempty"`
	// EventIDs are a batch's deliveries (BatchVersion): several of one
	// subscriber's, run by one task (batch.go).
	EventIDs []string `json:"event_ids,omitempty"`
}

// LegacyDelivery is a version-2 payload (the release before this one). It
// is read only to adopt the task (see Delivery).
type LegacyDelivery struct {
	V            int       `json:"v,omitempty"`
	SubscriberID string    `json:"subscriber_id"`
	Gen          string    `json:"gen,omitempty"`
	MaxAttempts  int       `json:"max_attempts,omitempty"`
	Event        Event     `json:"event"`
	EnqueuedAt   time.Time `json:"enqueued_at"`
	NotBefore    time.Time `json:"not_before,omitzero"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// AsynqMaxRetry is the MaxRetry hooklane gives the task of a delivery
// whose attempt budget is maxAttempts: that budget, which asynqmon shows
// as the task's max_retry. asynq archives a task on its own, without
// asking, once its Retried reaches MaxRetry; the worker's IsFailure is
// always false, so neither of asynq's retries (a handler's error, a lost
// lease its recoverer takes back: asynq v0.26 processor.go and
// recoverer.go both pass the error through IsFailure) counts, Retried
// stays 0, and a MaxRetry of at least 1 is never reached. hooklane counts
// the attempts in the delivery record and dead-letters, ledger first,
// itself. (The release before gave every task 1<<30.)
func AsynqMaxRetry(maxAttempts int) int { return max(maxAttempts, 1) }

// NewDeliverTask builds the task of subscriber sub's delivery of event
// eventID. opts are passed to asynq; the caller adds TaskID, Queue and
// MaxRetry.
func NewDeliverTask(sub, eventID string, opts ...asynq.Option) *asynq.Task {
	b, _ := json.Marshal(Delivery{V: TaskVersion, SubscriberID: sub, EventID: eventID}) // strings: cannot fail
	return asynq.NewTask(TypeDeliver, b, opts...)
}

// DecodeTask reads a TypeDeliver payload: a Delivery of this release, or
// (legacy non-nil) a version-2 task to adopt. A payload that cannot be read
// wraps asynq.SkipRetry (it will not read better later: it goes to the
// dead letters); one of a newer version wraps ErrNewerTask.
func DecodeTask(b []byte) (d Delivery, legacy *LegacyDelivery, err error) {
	// This release's tasks are read once; anything else (another version,
	// or a payload this shape cannot read) is looked at by its version.
	if err := json.Unmarshal(b, &d); err == nil && (d.V == TaskVersion || d.V == BatchVersion) {
		return d, nil, validDelivery(d)
	}
	d = Delivery{}
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return d, nil, fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
	}
	switch {
	case head.V > BatchVersion:
		return d, nil, fmt.Errorf("%w: payload version %d, this worker knows up to %d", ErrNewerTask, head.V, BatchVersion)
	case head.V == TaskVersion || head.V == BatchVersion:
		if err := json.Unmarshal(b, &d); err != nil {
			return d, nil, fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
		}
	default:
		var l LegacyDelivery
		if err := json.Unmarshal(b, &l); err != nil {
			return d, nil, fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
		}
		if l.MaxAttempts == 0 || l.Gen == "" {
			return d, nil, fmt.Errorf("undecodable payload: a task of a release before the last one (layout 1): %w", asynq.SkipRetry)
		}
		d, legacy = Delivery{V: head.V, SubscriberID: l.SubscriberID, EventID: l.Event.ID}, &l
	}
	if err := validDelivery(d); err != nil {
		return d, nil, err
	}
	return d, legacy, nil
}

// validDelivery checks a task's ids by the rules they were accepted under
// when it was queued: a task of an id refused since is still delivered.
func validDelivery(d Delivery) error {
	if err := ValidateScopedID(d.SubscriberID); err != nil {
		return fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
	}
	if d.V != BatchVersion {
		if err := validStoredEventID(d.EventID); err != nil {
			return fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
		}
		return nil
	}
	if d.EventID != "" || len(d.EventIDs) == 0 || len(d.EventIDs) > MaxBatch {
		return fmt.Errorf("undecodable payload: a batch names 1-%d event ids in event_ids, and no event_id: %w", MaxBatch, asynq.SkipRetry)
	}
	for _, ev := range d.EventIDs {
		if err := validStoredEventID(ev); err != nil {
			return fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
		}
	}
	return nil
}
