package tasks

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The states of a delivery, as its record (Keys.Delivery) holds them.
const (
	StateScheduled = "scheduled" // waiting for its time: a not-before time, its pacing slot, a free in-flight slot
	StatePending   = "pending"   // due, in its queue
	StateInFlight  = "in_flight" // taken by a worker: its request is being sent
	StateRetrying  = "retrying"  // a counted failure, waiting for its backoff
	StateCooling   = "cooling"   // its destination cools down (a 429's or 503's Retry-After)
	StateHeld      = "held"      // its subscriber is paused or its circuit breaker open
	StateDelivered = "delivered"
	StateDead      = "dead" // dead-lettered (see the ledger)
)

// States lists every delivery state.
var States = []string{StateScheduled, StatePending, StateInFlight, StateRetrying, StateCooling, StateHeld, StateDelivered, StateDead}

// DeliveryRecord is what hooklane keeps of one (subscriber, event)
// delivery. Its hash fields: g, w, q (the generation, first wake-up and
// queue it was booked with at publish: a re-publish is a duplicate; w is
// dropped once it ends, q once it is delivered), t (event type), p (published, Unix ms,
// Redis' clock), u (due), s (state), nx (next attempt), dl (delivered), n
// (attempts), r (resends), and one field per attempt (AttemptField, its
// time; EncodeAttempt, the rest). Field names and values are short: a
// delivered record with one attempt is about 200 bytes of Redis memory.
type DeliveryRecord struct {
	SubscriberID string    `json:"subscriber_id"`
	EventID      string    `json:"event_id"`
	EventType    string    `json:"event_type"`
	State        string    `json:"state"`
	PublishedAt  time.Time `json:"published_at"`
	DueAt        time.Time `json:"due_at"`
	DeliveredAt  time.Time `json:"delivered_at,omitzero"`
	NextAttempt  time.Time `json:"next_attempt_at,omitzero"`
	AttemptCount int       `json:"attempt_count"`
	Resends      int       `json:"resends,omitempty"`
	Attempts     []Attempt `json:"attempts,omitempty"` // oldest first; only where asked for
	// Queue is the asynq queue its task was booked in, while the record
	// keeps it (not once delivered); not shown.
	Queue string `json:"-"`
}

// AttemptField names the record field of an attempt made at at.
func AttemptField(at time.Time) string { return "a:" + strconv.FormatInt(at.UnixMilli(), 10) }

// ParseDeliveryRecord reads a record's hash (HGETALL); ok is false when it
// is empty (no such record). withAttempts decodes the attempts too.
func ParseDeliveryRecord(sub, eventID string, h map[string]string, withAttempts bool) (DeliveryRecord, bool) {
	if len(h) == 0 || h["g"] == "" {
		return DeliveryRecord{}, false
	}
	ms := func(f string) time.Time {
		n, err := strconv.ParseInt(h[f], 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(n).UTC()
	}
	d := DeliveryRecord{SubscriberID: sub, EventID: eventID, EventType: h["t"], State: h["s"],
		PublishedAt: ms("p"), DueAt: ms("u"), DeliveredAt: ms("dl"), NextAttempt: ms("nx"), Queue: h["q"]}
	d.AttemptCount, _ = strconv.Atoi(h["n"])
	d.Resends, _ = strconv.Atoi(h["r"])
	if withAttempts {
		var fields []string
		for f := range h {
			if strings.HasPrefix(f, "a:") {
				fields = append(fields, f)
			}
		}
		slices.SortFunc(fields, func(a, b string) int {
			x, _ := strconv.ParseInt(a[2:], 10, 64)
			y, _ := strconv.ParseInt(b[2:], 10, 64)
			return int(x - y)
		})
		for _, f := range fields {
			ms, _ := strconv.ParseInt(f[2:], 10, 64)
			if a, ok := decodeAttempt(time.UnixMilli(ms), h[f]); ok {
				d.Attempts = append(d.Attempts, a)
			}
		}
	}
	return d, true
}

// ParseStoredEvent reads the value of an event's key (Keys.Event):
// "<published Unix ms> <subscriber id> …\n<Event JSON>". ok is false for
// an empty or malformed value (no such event). The subscribers are sorted.
func ParseStoredEvent(v string) (ev Event, subs []string, published time.Time, ok bool) {
	head, _, _ := strings.Cut(v, "\n")
	fields := strings.Fields(head)
	ev, ok = storedEventOnly(v)
	if !ok || len(fields) == 0 {
		return Event{}, nil, time.Time{}, false
	}
	ms, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return Event{}, nil, time.Time{}, false
	}
	subs = fields[1:]
	slices.Sort(subs)
	return ev, subs, time.UnixMilli(ms).UTC(), true
}

// storedEventOnly reads only the event of an event key's value, without
// its subscriber list.
func storedEventOnly(v string) (ev Event, ok bool) {
	_, body, found := strings.Cut(v, "\n")
	if !found || json.Unmarshal([]byte(body), &ev) != nil {
		return Event{}, false
	}
	return ev, true
}

// StoredEventBody is the event JSON of an event key's value, as the
// producer wrote it (json.Marshal of the Event, "id" first), if it is event
// id's: what a delivery sends, byte for byte, without parsing it. id is
// one ValidateEventID accepts, so it needs no escaping in JSON.
func StoredEventBody(v, id string) ([]byte, bool) {
	_, body, found := strings.Cut(v, "\n")
	rest, ok := strings.CutPrefix(body, `{"id":"`)
	if !found || !ok || !strings.HasPrefix(rest, id) || !strings.HasPrefix(rest[len(id):], `",`) || !strings.HasSuffix(body, "}") {
		return nil, false
	}
	return []byte(body), true
}

// storedAttempt is an Attempt as a delivery record keeps it: short names,
// times in Unix ms, the attempt's own time in its field's name.
type storedAttempt struct {
	Status     int    `json:"s,omitempty"`
	RetryAfter string `json:"r,omitempty"`
	Error      string `json:"e,omitempty"`
	LatencyMS  int64  `json:"l,omitempty"`
	Spent      int    `json:"k,omitempty"`
	Body       string `json:"b,omitempty"`
	NextAt     int64  `json:"n,omitempty"`
}

// EncodeAttempt is the value of an attempt's field in a delivery record
// (its time is the field's name, AttemptField).
func EncodeAttempt(a Attempt) []byte {
	s := storedAttempt{Status: a.Status, RetryAfter: a.RetryAfter, Error: a.Error, LatencyMS: a.LatencyMS,
		Spent: a.AttemptsSpent, Body: a.Body}
	if !a.NextAt.IsZero() {
		s.NextAt = a.NextAt.UnixMilli()
	}
	b, _ := json.Marshal(s) // strings and numbers always marshal
	return b
}

func decodeAttempt(at time.Time, v string) (Attempt, bool) {
	var s storedAttempt
	if json.Unmarshal([]byte(v), &s) != nil {
		return Attempt{}, false
	}
	a := Attempt{At: at.UTC(), Status: s.Status, RetryAfter: s.RetryAfter, Error: s.Error, LatencyMS: s.LatencyMS,
		AttemptsSpent: s.Spent, Body: s.Body}
	if s.NextAt > 0 {
		a.NextAt = time.UnixMilli(s.NextAt).UTC()
	}
	return a, true
}
