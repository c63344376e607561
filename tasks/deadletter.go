package tasks

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Attempt is one request made for a delivery, as the dead-letter ledger
// keeps it.
type Attempt struct {
	At         time.Time `json:"at"`
	Status     int       `json:"status,omitempty"` // 0: no answer (see Error)
	RetryAfter string    `json:"retry_after,omitempty"`
	Error      string    `json:"error,omitempty"`
	LatencyMS  int64     `json:"latency_ms,omitempty"`
	// AttemptsSpent is how many of the delivery's attempts (its
	// max_attempts) were spent before this request: a 429 or a deferral
	// spends none, a lost worker's lease one.
	AttemptsSpent int `json:"attempts_spent,omitempty"`
	// Body is the first bytes of the response's body (the worker's
	// HOOKLANE_RESPONSE_BODY_BYTES), as text; invalid UTF-8 is replaced.
	Body string `json:"body,omitempty"`
	// NextAt is when the delivery was to be tried again after it (zero:
	// not, or not known).
	NextAt time.Time `json:"next_at,omitzero"`
	// Note says what else the operator should know of this request: it
	// went before a cooldown the endpoint asked for had run out, because
	// an operator ended it ("sent early: cooldown ended by an operator at
	// <time>").
	Note string `json:"note,omitempty"`
	// RequestHeaders are the headers hooklane set on the request, as sent
	// but for webhook-signature, cut to each signature's first characters
	// (a whole signature would let anyone replay the request within the
	// receiver's tolerance). Empty when no request was made, and in an
	// attempt recorded by a release before.
	RequestHeaders []Header `json:"request_headers,omitempty"`
	// ResponseHeaders are a bounded subset of the answer's headers
	// (MaxResponseHeaders, MaxResponseHeaderBytes), in name order;
	// ResponseHeadersCut counts those left out.
	ResponseHeaders    []Header `json:"response_headers,omitempty"`
	ResponseHeadersCut int      `json:"response_headers_cut,omitempty"`
}

// Header is one HTTP header line of an attempt.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// The bound on the response headers an attempt keeps: written with the
// attempt in the commit that records it, they cost Redis memory per
// attempt, so a receiver's 60 KiB of headers cannot blow a record up.
const (
	MaxResponseHeaders     = 20
	MaxResponseHeaderBytes = 2 << 10 // names and values together
)

// DeadLetter is a delivery that hooklane gave up on, as recorded in its own
// ledger. asynq's archive shows the same tasks in asynqmon but is trimmed to
// 10,000 per queue and 90 days; the ledger keeps every one until it is
// replayed, deleted or past the operator's retention.
type DeadLetter struct {
	TaskID       string    `json:"task_id"`
	Queue        string    `json:"queue,omitempty"` // the asynq queue its archived task is in
	SubscriberID string    `json:"subscriber_id,omitempty"`
	Event        *Event    `json:"event,omitempty"`   // nil when the payload was unreadable
	Payload      string    `json:"payload,omitempty"` // the raw payload, kept only when unreadable
	Reason       string    `json:"reason"`            // attempts, horizon, gone, deleted, undecodable
	Error        string    `json:"error"`
	Attempts     []Attempt `json:"attempts"`
	DeadAt       time.Time `json:"dead_at"`
	ReplayedAt   time.Time `json:"replayed_at,omitzero"`
	// Gen is the subscriber's generation the delivery was booked for (""
	// in an entry of a release before): a replay sends it only to that
	// generation, never to a subscriber deleted and created again since.
	// Kept in the ledger entry, not shown: the API shows no generation.
	Gen string `json:"-"`
}

// ledgerEntry is a dead letter as the ledger keeps it (Keys.Ledger's
// Entry): DeadLetter's fields with the event as the body it was sent, and
// the attempts as the delivery record kept them ("a": attempt time in Unix
// ms → EncodeAttempt), copied from the record by the script that commits
// the dead state, which adds the record's generation ("gen") too. The
// release before wrote "attempts" beside it, in a list of their own
// (LedgerKeys.Attempts).
type ledgerEntry struct {
	TaskID       string                     `json:"task_id"`
	Queue        string                     `json:"queue,omitempty"`
	SubscriberID string                     `json:"subscriber_id,omitempty"`
	Gen          string                     `json:"gen,omitempty"`
	Event        json.RawMessage            `json:"event,omitempty"`
	Payload      string                     `json:"payload,omitempty"`
	Reason       string                     `json:"reason"`
	Error        string                     `json:"error"`
	DeadAt       time.Time                  `json:"dead_at"`
	ReplayedAt   time.Time                  `json:"replayed_at,omitzero"`
	A            map[string]json.RawMessage `json:"a"`
}

// DeadLetterPrefix is a ledger entry's JSON up to its attempts: the script
// that commits the dead state appends them and the closing brace. body is
// the event's body as sent (nil when there is none: e.Payload then keeps
// what the task held).
func DeadLetterPrefix(e DeadLetter, body []byte) string {
	l := ledgerEntry{TaskID: e.TaskID, Queue: e.Queue, SubscriberID: e.SubscriberID, Gen: e.Gen, Payload: e.Payload,
		Reason: e.Reason, Error: e.Error, DeadAt: e.DeadAt, ReplayedAt: e.ReplayedAt}
	b, _ := json.Marshal(l) // plain data: cannot fail
	s := string(b)
	s = s[:len(s)-len(`,"a":null}`)]
	if len(body) > 0 {
		// As sent, byte for byte (json.Marshal would compact it).
		s += `,"event":` + string(body)
	}
	return s
}

// MarshalLedger is the ledger entry of e, attempts included (a replay
// marking it replayed writes it back whole).
func MarshalLedger(e DeadLetter) []byte {
	var body []byte
	if e.Event != nil {
		body = EventBody(*e.Event)
	}
	a := make(map[string]json.RawMessage, len(e.Attempts))
	for _, at := range e.Attempts {
		a[strconv.FormatInt(at.At.UnixMilli(), 10)] = EncodeAttempt(at)
	}
	attempts, _ := json.Marshal(a)
	return []byte(DeadLetterPrefix(e, body) + `,"a":` + string(attempts) + `}`)
}

// ParseLedger reads a ledger entry, of this release (attempts inside) or
// the one before (attempts from its list: legacy, oldest first; a retried
// write may have pushed one twice).
func ParseLedger(v string, legacy []string) (DeadLetter, bool) {
	var l ledgerEntry
	if json.Unmarshal([]byte(v), &l) != nil {
		return DeadLetter{}, false
	}
	e := DeadLetter{TaskID: l.TaskID, Queue: l.Queue, SubscriberID: l.SubscriberID, Gen: l.Gen, Payload: l.Payload, Reason: l.Reason,
		Error: l.Error, DeadAt: l.DeadAt, ReplayedAt: l.ReplayedAt}
	if len(l.Event) > 0 && string(l.Event) != "null" {
		var ev Event
		if json.Unmarshal(l.Event, &ev) == nil {
			e.Event = &ev
		}
	}
	for ms, raw := range l.A {
		n, err := strconv.ParseInt(ms, 10, 64)
		if a, ok := decodeAttempt(time.UnixMilli(n), string(raw)); err == nil && ok {
			e.Attempts = append(e.Attempts, a)
		}
	}
	slices.SortFunc(e.Attempts, func(a, b Attempt) int { return a.At.Compare(b.At) })
	var old struct {
		Attempts []Attempt `json:"attempts"`
	}
	if l.A == nil && json.Unmarshal([]byte(v), &old) == nil {
		e.Attempts = append(e.Attempts, old.Attempts...)
	}
	prev := ""
	for _, s := range legacy {
		var at Attempt
		if s != prev && json.Unmarshal([]byte(s), &at) == nil {
			e.Attempts = append(e.Attempts, at)
		}
		prev = s
	}
	return e, true
}
