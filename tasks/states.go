package tasks

import "time"

// A delivery's states: the one vocabulary of the API (a delivery's
// state, the state filter of its list, a subscriber's status counts), the
// console, the CLI and the demo's progress line.
//
//	state      where it is                     why it waits, until when
//	---------  ------------------------------  --------------------------------------------------
//	scheduled  parked, never tried             its not-before time, or its turn at the subscriber's
//	                                           rate and in-flight limit
//	retrying   parked, tried before            a failure's backoff, or its turn after a request
//	cooling    parked, due before the          the destination's cooldown (a 429's or 503's
//	           cooldown ends                   Retry-After), until it ends
//	held       parked                          the subscriber is paused (until resumed) or its
//	                                           circuit breaker open (until a probe succeeds)
//	pending    handed to the workers (asynq)   a worker to take it
//	in_flight  taken by a worker               its request being sent
//	delivered  ended: the endpoint answered 2xx
//	dead       ended: dead-lettered            (see the ledger)
//
// A parked delivery shows why it waits now (ParkedState): held while its
// subscriber is paused or its breaker open, cooling while a cooldown runs
// that it would otherwise not wait out, whatever its record last said (the record is rewritten only when a
// dispatcher's turn looks at it again). A publish's outcome per target
// uses the same words where they apply (producer.Outcome: enqueued is
// pending, scheduled, held with why: paused, breaker_open, cooling).
const (
	StateScheduled = "scheduled"
	StatePending   = "pending"
	StateInFlight  = "in_flight"
	StateRetrying  = "retrying"
	StateCooling   = "cooling"
	StateHeld      = "held"
	StateDelivered = "delivered"
	StateDead      = "dead"
)

// States lists every delivery state.
var States = []string{StateScheduled, StatePending, StateInFlight, StateRetrying, StateCooling, StateHeld, StateDelivered, StateDead}

// Parked reports whether state is one of a delivery waiting in its
// subscriber's schedule (its lot).
func Parked(state string) bool {
	return state == StateScheduled || state == StateRetrying || state == StateCooling || state == StateHeld
}

// Gate is what of a subscriber's gates decides why its parked deliveries
// wait now.
type Gate struct {
	Paused, BreakerOpen bool
	// CoolingUntil is the end of the cooldown in force; zero when none is.
	CoolingUntil time.Time
}

// ParkedState is the state a parked delivery due at due shows: held while
// the subscriber is paused or its breaker open, cooling while a cooldown
// runs that ends at or after due, else retrying when a request was made
// for it (tried), scheduled when none was.
func ParkedState(tried bool, due time.Time, g Gate) string {
	switch {
	case g.Paused || g.BreakerOpen:
		return StateHeld
	case !g.CoolingUntil.IsZero() && !due.After(g.CoolingUntil):
		return StateCooling
	case tried:
		return StateRetrying
	}
	return StateScheduled
}
