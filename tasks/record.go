package tasks

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DeliveryRecord is what hooklane keeps of one (subscriber, event)
// delivery: its one record (Keys.Delivery), the owner of every fact about
// it. Its hash fields (RecordField* name them): g (the subscriber's
// generation it was booked for: a re-publish in it is a duplicate), t
// (event type), p (published), u (due: the later of the publish and the
// not-before time), ce (an operator ended, then, the cooldown it waited
// on: its next attempt carries the note), x (expires: due + retry horizon), m (max attempts), s
// (state), n (requests made), c (attempts spent in this series: 429s,
// probes, deferrals and interrupted requests spend none), nx (next
// attempt), dl (delivered), r (resends), q (the lane of its last task),
// tk (the run that owns it now), ok (the last run whose outcome is
// committed: a write sent twice is applied once), pt (the publish that
// booked it), pk (the run that parked it), le (a dead letter of it may
// exist: it was dead-lettered, or adopted from the release before, so
// its delivery looks for a stale one to clear), and one field
// per attempt (AttemptField, its time; EncodeAttempt, the rest). Times
// are Unix ms in Redis' clock. Names and values are short: a delivered
// record with one attempt is about 200 bytes of Redis memory.
type DeliveryRecord struct {
	SubscriberID string    `json:"subscriber_id"`
	EventID      string    `json:"event_id"`
	EventType    string    `json:"event_type"`
	State        string    `json:"state"`
	PublishedAt  time.Time `json:"published_at"`
	DueAt        time.Time `json:"due_at"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
	DeliveredAt  time.Time `json:"delivered_at,omitzero"`
	NextAttempt  time.Time `json:"next_attempt_at,omitzero"`
	AttemptCount int       `json:"attempt_count"`
	// AttemptsSpent is how many of its max attempts the delivery has spent
	// (in its current series): a 429's wait, a hold, a failed probe and a
	// request cut by a shutdown spend none.
	AttemptsSpent int       `json:"attempts_spent"`
	Resends       int       `json:"resends,omitempty"`
	Attempts      []Attempt `json:"attempts,omitempty"` // oldest first; only where asked for
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
		PublishedAt: ms("p"), DueAt: ms("u"), ExpiresAt: ms("x"), DeliveredAt: ms("dl"), NextAttempt: ms("nx")}
	d.AttemptCount, _ = strconv.Atoi(h["n"])
	d.AttemptsSpent, _ = strconv.Atoi(h["c"])
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
	Note       string `json:"o,omitempty"`
	// Request and response headers as [name, value] pairs; hc: how many
	// response headers were left out.
	Request  [][2]string `json:"q,omitempty"`
	Response [][2]string `json:"h,omitempty"`
	Cut      int         `json:"hc,omitempty"`
}

func pairs(hs []Header) [][2]string {
	var out [][2]string
	for _, h := range hs {
		out = append(out, [2]string{h.Name, h.Value})
	}
	return out
}

func headers(ps [][2]string) []Header {
	var out []Header
	for _, p := range ps {
		out = append(out, Header{Name: p[0], Value: p[1]})
	}
	return out
}

// EncodeAttempt is the value of an attempt's field in a delivery record
// (its time is the field's name, AttemptField).
func EncodeAttempt(a Attempt) []byte {
	s := storedAttempt{Status: a.Status, RetryAfter: a.RetryAfter, Error: a.Error, LatencyMS: a.LatencyMS,
		Spent: a.AttemptsSpent, Body: a.Body, Note: a.Note, Request: pairs(a.RequestHeaders), Response: pairs(a.ResponseHeaders),
		Cut: a.ResponseHeadersCut}
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
		AttemptsSpent: s.Spent, Body: s.Body, Note: s.Note, RequestHeaders: headers(s.Request), ResponseHeaders: headers(s.Response),
		ResponseHeadersCut: s.Cut}
	if s.NextAt > 0 {
		a.NextAt = time.UnixMilli(s.NextAt).UTC()
	}
	return a, true
}
