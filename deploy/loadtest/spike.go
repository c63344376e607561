package loadtest

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hooklane/hooklane/limits"
)

// SpikeSpec sizes the spike ladder.
type SpikeSpec struct {
	BaseRate    float64       // baseline publishes per second
	Multipliers []int         // the ladder, e.g. 3, 10, 30
	Baseline    time.Duration // baseline stage before each spike
	Hold        time.Duration // how long each spike is held
	CappedRate  int           // the capped subscriber's limit per second
}

func (e *env) spikeSpec() SpikeSpec {
	if e.cfg.Spike != nil {
		return *e.cfg.Spike
	}
	return SpikeSpec{BaseRate: 5 * e.cfg.Scale, Multipliers: []int{3, 10, 30}, Baseline: 10 * time.Second,
		Hold: e.cfg.Hold, CappedRate: e.scale(100)}
}

// Step is one rung of the ladder. Times are seconds since the scenario
// started.
type Step struct {
	Multiplier      int     `json:"multiplier"`
	BaseRate        float64 `json:"base_rate"`
	SpikeRate       float64 `json:"spike_rate"`
	StartS          float64 `json:"start_s"`
	SpikeS          float64 `json:"spike_s"`
	RecoverS        float64 `json:"recover_s"`
	EndS            float64 `json:"end_s"`
	ExpectedBacklog float64 `json:"expected_backlog"` // (spike rate − capacity) · hold, for the capped subscriber
	PeakBacklog     float64 `json:"peak_backlog"`     // the capped subscriber's, at a second's end
	PeakQueue       int64   `json:"peak_queue"`       // the whole queue, sampled each second
	DrainS          float64 `json:"drain_s"`          // spike end → capped backlog back to baseline
	MinDrainS       float64 `json:"min_drain_s"`      // peak backlog ÷ (capacity − base rate)
	Recovered       bool    `json:"recovered"`        // drained before the step ended
	FastPre         Latency `json:"fast_pre"`         // the fast subscriber's latency before the spike,
	FastHold        Latency `json:"fast_hold"`        // during it,
	FastPost        Latency `json:"fast_post"`        // and in the last baseline stretch after it
	CappedPre       Latency `json:"capped_pre"`
	CappedPost      Latency `json:"capped_post"`
}

// spikeShots lays out the ladder as one open-loop schedule.
func spikeShots(s SpikeSpec, capacity float64) ([]Shot, []Step) {
	var shots []Shot
	var steps []Step
	var t time.Duration
	add := func(rate float64, d time.Duration) {
		n := int(math.Round(rate * d.Seconds()))
		for i := range n {
			at := t + time.Duration(float64(d)*float64(i)/float64(n))
			shots = append(shots, Shot{At: at, Event: event(fmt.Sprintf("sp-%06d", len(shots)), "spike.tick", len(shots))})
		}
		t += d
	}
	for _, k := range s.Multipliers {
		st := Step{Multiplier: k, BaseRate: s.BaseRate, SpikeRate: s.BaseRate * float64(k), StartS: t.Seconds()}
		add(s.BaseRate, s.Baseline)
		st.SpikeS = t.Seconds()
		add(st.SpikeRate, s.Hold)
		st.RecoverS = t.Seconds()
		st.ExpectedBacklog = math.Max(0, st.SpikeRate-capacity) * s.Hold.Seconds()
		// Seed 003: the recovery stage lasts at least twice the computed
		// drain time, so a run that does not drain has really failed.
		drain := st.ExpectedBacklog / math.Max(capacity-s.BaseRate, 1)
		add(s.BaseRate, max(s.Baseline, time.Duration(2*drain*float64(time.Second))))
		st.EndS = t.Seconds()
		steps = append(steps, st)
	}
	return shots, steps
}

// runSpike holds a baseline, jumps to 3×, 10×, 30× for Hold each, and
// recovers in between, fanned out to a capped subscriber (which builds a
// backlog once the spike passes its limit) and a fast one (whose latency
// shows whether the backlog next door hurts it).
func (e *env) runSpike(ctx context.Context, r *ScenarioReport) error {
	s := e.spikeSpec()
	subs := []subSpec{
		{ID: "spike-capped", Role: "capped subscriber", EventTypes: []string{"spike.tick"}, Endpoint: Endpoint{Kind: Fast},
			Limit: limits.Limit{Rate: s.CappedRate, Burst: 20, Period: time.Second}, MaxInFlight: 10},
		{ID: "spike-fast", Role: "fast subscriber", Fast: true, EventTypes: []string{"spike.tick"}, Endpoint: Endpoint{Kind: Fast},
			Limit: limits.Limit{Rate: 20 * s.CappedRate, Burst: 200, Period: time.Second}, MaxInFlight: 50},
	}
	capacity := subs[0].capacity()
	shots, steps := spikeShots(s, capacity)
	r.About = fmt.Sprintf("baseline %.0f/s; spikes %v× held %s each; capped subscriber at %.0f/s, fast one at %d/s; %d events",
		s.BaseRate, s.Multipliers, s.Hold, capacity, subs[1].Limit.Rate, len(shots))
	return e.scenario(ctx, r, "spike", subs, func(ctx context.Context, sc *run) error {
		for _, sub := range subs {
			if err := e.register(ctx, sc.p, sub); err != nil {
				return err
			}
		}
		start := sc.start
		r.Generator = sc.gen.Run(ctx, start, shots, true)
		sc.phases = func(o map[string]*outcome) {
			capped, fast := o[subs[0].ID], o[subs[1].ID]
			backlog := r.Subscribers[0].Backlog
			at := func(sec float64) time.Time { return start.Add(time.Duration(sec * float64(time.Second))) }
			for i := range steps {
				st := &steps[i]
				st.PeakBacklog, st.DrainS = peakAndDrain(backlog, st, math.Max(2*s.BaseRate, 5))
				st.Recovered = st.DrainS >= 0
				st.MinDrainS = st.PeakBacklog / math.Max(capacity-s.BaseRate, 1)
				for _, q := range r.Queue {
					if q.T >= st.SpikeS && q.T < st.EndS {
						st.PeakQueue = max(st.PeakQueue, q.Backlog())
					}
				}
				post := at(math.Max(st.RecoverS, st.EndS-s.Baseline.Seconds()))
				st.FastPre, st.CappedPre = fast.latencyWhere(at(st.StartS), at(st.SpikeS)), capped.latencyWhere(at(st.StartS), at(st.SpikeS))
				st.FastHold = fast.latencyWhere(at(st.SpikeS), at(st.RecoverS))
				st.FastPost, st.CappedPost = fast.latencyWhere(post, at(st.EndS)), capped.latencyWhere(post, at(st.EndS))
				// A spike that never pushed the capped subscriber past its
				// limit (a generator far behind) tested nothing about it.
				if over := st.ExpectedBacklog - float64(subs[0].Limit.Burst); over > 0 && st.PeakBacklog < over/2 {
					r.invalid(true, "step %d×: the capped backlog peaked at %.0f, under half the %.0f the spike should leave beyond the burst: its limit was not pushed",
						st.Multiplier, st.PeakBacklog, over)
				}
				if !st.Recovered {
					r.Failures = append(r.Failures, fmt.Sprintf("step %d×: the capped backlog did not drain within the recovery stage", st.Multiplier))
				}
			}
			r.Steps = steps
			// Publishing never stops here, so first publish → last settle
			// says nothing; each step's drain above is the figure.
			for _, sr := range r.Subscribers {
				sr.DrainS, sr.MinDrainS = 0, 0
			}
		}
		return nil
	})
}

// peakAndDrain reads a per-second backlog series: the peak from the spike
// to the step's end, and how long after the spike ended the backlog first
// fell to at most level (−1: not within the step).
func peakAndDrain(backlog []float64, st *Step, level float64) (peak, drain float64) {
	drain = -1
	for i := int(st.SpikeS); i < int(st.EndS) && i < len(backlog); i++ {
		peak = math.Max(peak, backlog[i])
	}
	for i := int(st.RecoverS); i < int(st.EndS) && i < len(backlog); i++ {
		if backlog[i] <= level {
			// backlog[i] is at the end of second i.
			drain = math.Max(0, float64(i+1)-st.RecoverS)
			break
		}
	}
	return peak, drain
}
