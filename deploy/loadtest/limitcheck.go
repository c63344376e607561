package loadtest

import "time"

// Judging a subscriber's arrivals against burst + rate·t when this process
// may have stalled.
//
// A stall of the harness process (GC, CPU starvation on a shared machine)
// stops the receiver: requests that reach it meanwhile wait in the kernel
// and are timestamped together when it runs again. Such a bunch can look
// like a broken limit although the sender kept its pace. It can also hide
// a broken limiter, so a stall excuses a violation only when it explains
// that violation completely (judgeLimit); anything else fails the scenario.

// stallSettle is how long after a stall ends the receiver may still be
// timestamping requests that queued during it: its handler goroutines run
// as soon as the process does, within a few ms even on a busy 2-core
// machine. It bounds what a stall can excuse: the earlier 200ms dropped
// ten of the partner's requests (50/s) after every stall.
const stallSettle = 50 * time.Millisecond

// StallRef names one stall the lag probe measured: its timer fired LagMs
// late at At.
type StallRef struct {
	At    time.Time `json:"at"`
	LagMs float64   `json:"lag_ms"`
}

func (s stall) ref() StallRef { return StallRef{At: s.at, LagMs: ms(s.lag)} }

// span is when the receiver may have timestamped requests bunched by the
// stall: from when the process stopped (at − lag) until settle after it
// ran again.
func (s stall) span(settle time.Duration) (from, to time.Time) {
	return s.at.Add(-s.lag), s.at.Add(settle)
}

// overlaps reports whether the stall's span meets [from, to].
func (s stall) overlaps(from, to time.Time, settle time.Duration) bool {
	sf, st := s.span(settle)
	return !sf.After(to) && st.After(from)
}

// withoutStalls drops the arrivals (sorted) timestamped within any of the
// stalls' spans: they were bunched by the receiver, not by the sender. It
// returns the rest and how many it dropped.
func withoutStalls(at []time.Time, stalls []stall, settle time.Duration) ([]time.Time, int) {
	if len(stalls) == 0 {
		return at, 0
	}
	out := make([]time.Time, 0, len(at))
	for _, t := range at {
		hit := false
		for _, s := range stalls {
			if from, to := s.span(settle); !t.Before(from) && t.Before(to) {
				hit = true
				break
			}
		}
		if !hit {
			out = append(out, t)
		}
	}
	return out, len(at) - len(out)
}

// within returns the arrivals (sorted) in [from, to].
func within(at []time.Time, from, to time.Time) []time.Time {
	var out []time.Time
	for _, t := range at {
		if !t.Before(from) && !t.After(to) {
			out = append(out, t)
		}
	}
	return out
}

// Excuse is a limit violation that one measured stall explains: Window
// broke the limit by no more than the stall could bunch (Bunchable), Stall
// overlaps it, and without the Dropped arrivals the receiver timestamped
// during that stall the same window keeps the limit (Without is it then:
// same span and allowance, fewer requests).
type Excuse struct {
	Window    Window   `json:"window"`
	Stall     StallRef `json:"stall"`
	Bunchable float64  `json:"bunchable"`
	Dropped   int      `json:"dropped"`
	Without   Window   `json:"without"`
}

// limitVerdict is a subscriber's arrivals judged against its limit.
type limitVerdict struct {
	// Worst is the worst window once the excused stalls' arrivals are left
	// out. Exceeded: a violation no stall explains, which fails the
	// scenario.
	Worst   Window
	Excuses []Excuse
	Dropped int // arrivals left out, summed over Excuses
	// Tried are the stalls that overlapped an unexcused Worst but did not
	// explain it.
	Tried []StallRef
}

// judgeLimit checks at (sorted) against burst + rate·(t + slack). The
// worst window, if it exceeds, is excused only by one stall from stalls
// that
//
//  1. overlaps the window,
//  2. explains it: with exactly the arrivals the receiver timestamped
//     during that stall dropped, the window holds no more than it allows,
//  3. and is long enough to: the window exceeds its allowance by at most
//     rate·lag. A sender that kept the limit, stamped up to lag late,
//     can look that much over it and no more (its requests stamped in
//     [a, b] arrived in [a − lag, b], which allows burst + rate·(b − a +
//     lag + slack)). Without this a 1ms stall, whose 50ms settle holds a
//     few requests, could excuse a limiter that let through twice its
//     rate.
//
// Each stall excuses at most one window, the earliest that qualifies is
// taken, and after each excuse the whole series, without that stall's
// arrivals, is judged again: any violation left, inside the excused window
// or elsewhere, needs a stall of its own. Any other violation stands.
func judgeLimit(at []time.Time, rate float64, burst int, slack time.Duration, stalls []stall) limitVerdict {
	var v limitVerdict
	used := make([]bool, len(stalls))
	for {
		v.Worst, v.Tried = worstWindow(at, rate, burst, slack), nil
		if !v.Worst.Exceeded {
			return v
		}
		excused := false
		for i, s := range stalls {
			if used[i] || !s.overlaps(v.Worst.From, v.Worst.To, stallSettle) {
				continue
			}
			rest, dropped := withoutStalls(at, stalls[i:i+1], stallSettle)
			without := v.Worst
			without.Count = len(within(rest, without.From, without.To))
			without.Exceeded = float64(without.Count) > without.Allowed+1e-9
			bunchable := rate * s.lag.Seconds()
			if dropped == 0 || without.Exceeded || float64(v.Worst.Count) > v.Worst.Allowed+bunchable+1e-9 {
				v.Tried = append(v.Tried, s.ref())
				continue
			}
			used[i], excused = true, true
			v.Excuses = append(v.Excuses, Excuse{Window: v.Worst, Stall: s.ref(), Dropped: dropped, Without: without, Bunchable: bunchable})
			v.Dropped += dropped
			at = rest
			break
		}
		if !excused {
			return v
		}
	}
}
