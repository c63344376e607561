package loadtest

import "time"

// Blur is a Retry-After deadline at which a stall of this process may have
// hidden an early request. The receiver calls a request early by the time
// it stamps it, and a stall only ever makes stamps later: a request
// stamped after the deadline, during a stall that began before it, may
// have arrived before it. The worker comes back right at each deadline (it
// obeys them exactly, without jitter), so a request a few ms early is
// exactly what such a stall would hide.
type Blur struct {
	Deadline time.Time `json:"deadline"`
	Stall    StallRef  `json:"stall"`
	Requests int       `json:"requests"` // stamped after Deadline, within the stall's span
}

// blurredDeadlines returns the deadlines that a stall's span straddles
// with at least one arrival (at, sorted) stamped after the deadline
// within that span.
func blurredDeadlines(deadlines, at []time.Time, stalls []stall) []Blur {
	var out []Blur
	for _, d := range deadlines {
		for _, s := range stalls {
			from, to := s.span(stallSettle)
			if !from.Before(d) || !to.After(d) {
				continue
			}
			n := 0
			for _, t := range at {
				if !t.Before(d) && t.Before(to) {
					n++
				}
			}
			if n > 0 {
				out = append(out, Blur{Deadline: d, Stall: s.ref(), Requests: n})
			}
		}
	}
	return out
}
