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
// queue it was booked with at publish: a re-publish is a duplicate), x
// ("1" once a worker took its task), t (event type), p (published, Unix
// ms, Redis' clock), u (due), s (state), nx (next attempt), dl
// (delivered), n (attempts), r (resends), and one field per attempt
// (AttemptField: Attempt JSON).
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
		PublishedAt: ms("p"), DueAt: ms("u"), DeliveredAt: ms("dl"), NextAttempt: ms("nx")}
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
			var a Attempt
			if json.Unmarshal([]byte(h[f]), &a) == nil {
				d.Attempts = append(d.Attempts, a)
			}
		}
	}
	return d, true
}
