package web

import (
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// A page that shows a delivery under way reloads itself until the
// delivery is final: base.Refresh puts the seconds in the body's
// data-refresh, and console.js reloads the page then (not while the
// operator fills in a form). Without the script the page stays, as every
// console page works without it.

// refreshEvery is how often a page reloads while a delivery it shows is
// pending or in flight; refreshAhead is how far ahead a waiting delivery's
// next attempt may be for the page to reload when it comes.
const (
	refreshEvery = 2 * time.Second
	refreshAhead = time.Minute
)

// refreshFor is the seconds after which a page showing ds should reload
// (0: never): every refreshEvery while one is pending or in flight, at a
// waiting one's next attempt when it is at most refreshAhead away, never
// for one that is final or held (it waits for an operator).
func refreshFor(now time.Time, ds ...tasks.DeliveryRecord) int {
	best := time.Duration(0)
	for _, d := range ds {
		var in time.Duration
		switch d.State {
		case tasks.StatePending, tasks.StateInFlight:
			in = refreshEvery
		case tasks.StateScheduled, tasks.StateRetrying, tasks.StateCooling:
			next := d.NextAttempt
			if next.IsZero() {
				next = d.DueAt
			}
			if wait := next.Sub(now); !next.IsZero() && wait <= refreshAhead {
				in = max(refreshEvery, wait.Truncate(time.Second)+time.Second)
			}
		}
		if in > 0 && (best == 0 || in < best) {
			best = in
		}
	}
	return int(best / time.Second)
}
