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

func (e *Event) Validate() error {
	if err := ValidateEventID(e.ID); err != nil {
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

// ValidateEventID accepts 1-128 characters of A-Z a-z 0-9 . _ - : ~.
func ValidateEventID(id string) error {
	if id == "" || len(id) > 128 || !idChars(id, true) {
		return invalid("id", "want 1-128 characters of A-Z a-z 0-9 . _ - : ~")
	}
	return nil
}

// ValidateSubscriberID accepts 1-64 characters of A-Z a-z 0-9 . _ -; no colon,
// so that TaskID can be split unambiguously.
func ValidateSubscriberID(id string) error {
	if id == "" || len(id) > 64 || !idChars(id, false) || containsColon(id) {
		return invalid("subscriber_id", "want 1-64 characters of A-Z a-z 0-9 . _ -")
	}
	return nil
}

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

// SplitTaskID is TaskID's inverse (a subscriber id has no colon).
func SplitTaskID(id string) (sub, eventID string, ok bool) {
	sub, eventID, ok = strings.Cut(id, ":")
	return sub, eventID, ok && ValidateSubscriberID(sub) == nil && eventID != ""
}

// DeliveryVersion is the payload version this release writes. A payload
// without "v" was written by the release before (version 1): it carries
// no generation and no attempt budget, which asynq's MaxRetry then holds.
const DeliveryVersion = 2

// Delivery is the payload of a TypeDeliver task. It holds no secrets and no
// endpoint URL: the worker reads the subscriber when it delivers, so a
// rotated secret or a new URL applies to queued events too.
type Delivery struct {
	V            int    `json:"v,omitempty"`
	SubscriberID string `json:"subscriber_id"`
	Gen          string `json:"gen,omitempty"` // the subscriber generation it was published for
	MaxAttempts  int    `json:"max_attempts,omitempty"`
	Event        Event  `json:"event"`
	// PayloadRef: the event is stored once for all its subscribers
	// (Keys.Event) and Event holds its id, type and timestamp only (data
	// null): the worker reads the rest when it runs the task.
	PayloadRef bool      `json:"payload_ref,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	NotBefore  time.Time `json:"not_before,omitzero"`
	// ExpiresAt is the end of the retry horizon: past it a delivery that
	// still cannot be made is dead-lettered instead of rescheduled.
	ExpiresAt time.Time `json:"expires_at"`
}

// AsynqMaxRetry is the MaxRetry hooklane gives asynq: far above any attempt
// budget (Delivery.MaxAttempts, at most 100), so that asynq never archives
// a task on its own (it does, without asking, once Retried reaches
// MaxRetry; a lost lease counts). hooklane counts the attempts and
// dead-letters, ledger first, itself.
const AsynqMaxRetry = 1 << 30

// NewDeliverTask builds the task for d. opts are passed to asynq; the caller
// adds TaskID, Queue, MaxRetry and Retention.
func NewDeliverTask(d Delivery, opts ...asynq.Option) (*asynq.Task, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(TypeDeliver, b, opts...), nil
}

// DecodeDelivery parses a TypeDeliver payload. Its error wraps asynq.SkipRetry:
// a payload that cannot be read will not read better on a later attempt, so it
// goes straight to the dead letters.
func DecodeDelivery(b []byte) (Delivery, error) {
	var d Delivery
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
	}
	if err := ValidateSubscriberID(d.SubscriberID); err != nil {
		return d, fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
	}
	check := d.Event
	if d.PayloadRef {
		check.Data = json.RawMessage("null") // not here: read from the event's key
	}
	if err := check.Validate(); err != nil {
		return d, fmt.Errorf("undecodable payload: %v: %w", err, asynq.SkipRetry)
	}
	return d, nil
}
