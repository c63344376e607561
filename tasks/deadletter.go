package tasks

import "time"

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
}

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
}
