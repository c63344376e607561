package worker

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// goWake wakes the tasks the breaker held for sub when it closed: the
// members of its waiting index at that moment, soonest first, at the pace
// the slow start lets them be sent (a tenth of perSecond at first, all of
// it after ramp). Woken all at once, most would only be deferred again by
// the rate limiter, a handler run each for nothing. A member that is
// running or pending at its turn (a deferral on its way back to the
// schedule) is looked at again after the others. Stopped early
// (shutdown), it wakes the rest at once, so none waits for the far wake-up
// the breaker's cursor gave it.
func (b *background) goWake(h *handler, sub string, perSecond float64, ramp time.Duration) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		todo, err := h.gates.WaitingAll(b.ctx, h.keys.Gates(sub))
		if err != nil {
			// They wake by themselves at their booked wake-ups.
			h.log.Warn("could not list the events the breaker held", "subscriber_id", sub, "err", err)
			return
		}
		const tick = 100 * time.Millisecond
		start, woken, credit, rounds := time.Now(), 0, 0.0, 0
		var again []redis.Z // busy at their turn
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			if len(todo) == 0 && len(again) > 0 && rounds < 20 {
				todo, again, rounds = again, nil, rounds+1
			}
			if len(todo) == 0 {
				h.log.Debug("woke the events the breaker held", "subscriber_id", sub, "woken", woken, "still_busy", len(again))
				return
			}
			f := min(max(float64(time.Since(start))/float64(ramp), 0.1), 1)
			credit += perSecond * f * tick.Seconds()
			if n := min(int(credit), len(todo)); n > 0 {
				got, busy, err := h.prod.WakeMembers(b.ctx, sub, todo[:n])
				switch {
				case err != nil && b.ctx.Err() == nil:
					h.log.Warn("could not wake the events the breaker held", "subscriber_id", sub, "err", err)
					return
				case err == nil: // cut short by a shutdown: the rest below takes these too
					woken, credit, todo, again = woken+got, credit-float64(n), todo[n:], append(again, busy...)
				}
			}
			select {
			case <-b.ctx.Done():
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				got, _, _ := h.prod.WakeMembers(ctx, sub, append(todo, again...))
				cancel()
				h.log.Debug("stopping: woke the rest of the events the breaker held", "subscriber_id", sub, "woken", woken+got)
				return
			case <-t.C:
			}
		}
	}()
}
