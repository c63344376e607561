package loadtest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary writes the readable form of the report.
func (rep *Report) Summary(w io.Writer) {
	fmt.Fprintf(w, "hooklane bench, %s, %s\n", rep.Started.Format(time.RFC3339), rep.Machine)
	if rep.Command != "" {
		fmt.Fprintf(w, "command: %s\n", rep.Command)
	}
	fmt.Fprintf(w, "settings: scale %s, hold %s, concurrency %s, worker %s, window slack %s\n",
		rep.Settings["scale"], rep.Settings["hold"], rep.Settings["concurrency"], rep.Settings["worker"], rep.Settings["slack"])
	fmt.Fprintf(w, "topology: %s\n", rep.Topology)
	for _, r := range rep.Scenarios {
		fmt.Fprintln(w)
		r.summary(w)
	}
}

func verdict(r *ScenarioReport) string {
	v := "VALID"
	if !r.Valid {
		v = "INVALID (" + strings.Join(r.InvalidReasons, "; ") + ")"
	}
	p := "invariants PASS"
	if !r.Passed {
		p = "invariants FAIL"
	}
	return v + ", " + p
}

func (r *ScenarioReport) summary(w io.Writer) {
	fmt.Fprintf(w, "== %s: %s\n", r.Name, r.About)
	fmt.Fprintf(w, "   %s; wall %.0fs\n", verdict(r), r.WallSeconds)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "   FAIL %s\n", f)
	}
	for _, h := range r.Hiding {
		fmt.Fprintf(w, "   UNPROVEN (could hide a broken invariant) %s\n", h)
	}
	fmt.Fprintf(w, "   published %d, delivered %d, dead %d, lost %d, duplicates %d\n", r.Published, r.Delivered, r.Dead, r.Lost, r.Duplicates)
	pub := ""
	if r.Redis.IncludesPublishing {
		pub = ", publishing included"
	}
	if h := r.Redis.HarnessCommandsPerDelivery; h > 0 {
		pub += fmt.Sprintf(" (the harness' own %.1f commands left out)", h)
	}
	fmt.Fprintf(w, "   %.1f deliveries/s overall; %.3f handler runs per delivery; Redis per delivery: %.1f commands (Lua's included), %.2f round trips, %.0f µs in commands, %.0f µs CPU%s\n",
		r.DeliveriesPerSec, r.RunsPerDelivery, r.Redis.CommandsPerDelivery, r.Redis.RoundTripsPerDelivery, r.Redis.UsecPerDelivery, r.Redis.CPUUsecPerDelivery, pub)
	fmt.Fprintf(w, "   CPU per delivery: worker %s, harness (generator + receiver) %.0f µs\n", cpuText(r.WorkerCPUPerDelivery), r.HarnessCPUPerDelivery)
	fmt.Fprintf(w, "   worker peak RSS %s%s; %s; generator %d planned, %d late (p99 %s, max %s), %d failed; receiver timer lag p99 %.1fms max %.1fms\n",
		rssText(r.WorkerPeakRSSMiB), summed(len(r.Workers), r.WorkerPeakRSSMiB), shardsText(r.QueueShards), r.Generator.Planned, r.Generator.Late, r.Generator.P99Late.Round(time.Millisecond),
		r.Generator.MaxLate.Round(time.Millisecond), r.Generator.Failed, r.ProbeP99Ms, r.ProbeMaxMs)
	if len(r.Redis.Top) > 0 {
		fmt.Fprintf(w, "   top Redis commands per delivery: %s\n", topText(r.Redis.Top))
	}
	if len(r.Redis.Masters) > 1 {
		fmt.Fprintf(w, "   per master: %s\n", mastersText(r.Redis.Masters))
	}
	if len(r.Workers) > 1 {
		fmt.Fprintf(w, "   workers: %s\n", procsText(r.Workers))
	}
	subscribersText(w, r.Subscribers)
	for _, l := range r.Latency {
		fmt.Fprintf(w, "   latency %s publish→delivery: alone p50 %.0fms p99 %.0fms; with the bad subscribers p50 %.0fms p99 %.0fms; ratio p50 %.2f, p99 %.2f\n",
			l.Subscriber, l.Alone.P50, l.Alone.P99, l.WithBad.P50, l.WithBad.P99, l.RatioP50, l.RatioP99)
	}
	for _, st := range r.Steps {
		fmt.Fprintf(w, "   step %2d×: %.0f→%.0f/s at %.0fs; capped backlog expected %.0f, peak %.0f (queue %d); drain %s vs min %.1fs; fast p99 pre %.0fms hold %.0fms post %.0fms; capped p99 pre %.0fms post %.0fms\n",
			st.Multiplier, st.BaseRate, st.SpikeRate, st.SpikeS, st.ExpectedBacklog, st.PeakBacklog, st.PeakQueue,
			drainText(st), st.MinDrainS, st.FastPre.P99, st.FastHold.P99, st.FastPost.P99, st.CappedPre.P99, st.CappedPost.P99)
	}
	if t := r.Throughput; t != nil {
		t.summary(w)
	}
	if t := r.Trickle; t != nil {
		t.summary(w)
	}
	if t := r.Tenants; t != nil {
		t.summary(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "   note: %s\n", n)
	}
	if r.Chart != "" {
		fmt.Fprintf(w, "   chart: %s\n", r.Chart)
	}
}

// subscribersText is a row per subscriber, then its role, behaviour and
// what its endpoint did; more than maxListed get one line for all
// (subscribersSum), and report.json has each.
func subscribersText(w io.Writer, subs []*SubReport) {
	if len(subs) > maxListed {
		subscribersSum(w, subs)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "   subscriber\tlimit\tcapacity/s\tsteady/s\tworst window (n/s ≤ allowed)\t429\toverlap\tearly\tbans\t403\tpub\tdeliv\tdead\tlost\tdup\truns/deliv\tp50 ms\tp99 ms\tdrain s\tmin s\t")
	for _, s := range subs {
		fmt.Fprintf(tw, "   %s\t%g/s b%d if%d\t%.0f\t%s\t%d/%.2fs ≤ %.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.0f\t%.0f\t%s\t%s\t\n",
			s.ID, s.Rate, s.Burst, s.MaxInFlight, s.Capacity, steadyText(s.SteadyRate), s.Worst.Count, s.Worst.Span, s.Worst.Allowed,
			s.Stats.Throttled, s.Stats.Overlap, s.Stats.Early, s.Stats.Bans, s.Stats.Banned,
			s.Published, s.Delivered, s.Dead, s.Lost, s.Duplicates, ratio(float64(s.Runs), float64(s.Delivered)),
			s.Latency.P50, s.Latency.P99, orDash(s.DrainS), orDash(s.MinDrainS))
	}
	tw.Flush()
	for _, s := range subs {
		fmt.Fprintf(w, "   %s (%s): %s", s.ID, s.Role, s.Behaviour)
		if len(s.DeadReasons) > 0 {
			fmt.Fprintf(w, "; dead: %v", s.DeadReasons)
		}
		fmt.Fprintf(w, "%s\n", adversaryText(s))
	}
}

// summary writes the throughput comparison: each path's median round,
// its rounds and the ratios.
func (t *Throughput) summary(w io.Writer) {
	type path struct {
		name string
		r    PathResult
	}
	paths := []path{{"floor (plain asynq + POST, 1 Server)", t.Floor}}
	if t.FloorMulti != nil {
		paths = append(paths, path{fmt.Sprintf("floor (plain asynq + POST, %d Servers in one process)", t.FloorServers), *t.FloorMulti})
	}
	paths = append(paths, path{fmt.Sprintf("hooklane (%s)", plural(len(t.Hooklane.Processes), "worker", "workers")), t.Hooklane})
	for _, p := range paths {
		pathText(w, p.name, p.r, "receiver")
	}
	multi := ""
	if t.FloorMulti != nil {
		multi = fmt.Sprintf("; floor of %d Servers %s", t.FloorServers, roundsText(t.FloorMultiRounds))
	}
	fmt.Fprintf(w, "   rounds (deliveries/s): floor %s%s; hooklane %s\n", roundsText(t.FloorRounds), multi, roundsText(t.HooklaneRounds))
	fmt.Fprintf(w, "   ratio hooklane ÷ floor (medians): %.2f (target ≥ %.2f)", t.Ratio, t.Target)
	if t.FloorMulti != nil {
		fmt.Fprintf(w, "; ÷ the floor of %d Servers: %.2f", t.FloorServers, t.RatioMulti)
	}
	fmt.Fprintln(w)
	if t.CPURatio > 0 {
		fmt.Fprintf(w, "   CPU per delivery (Redis + server + receiver), median rounds: hooklane %.0f µs, floor %.0f µs: %.2f× the floor's\n",
			t.Hooklane.CPU(), t.Floor.CPU(), t.CPURatio)
	}
}

// pathText is one path's median round: its rate, and per delivery its
// Redis work and the CPU of each part (harness: what this process did,
// the receiver and, when it published during the round, the publisher).
func pathText(w io.Writer, name string, r PathResult, harness string) {
	fmt.Fprintf(w, "   %s, median round: %.0f deliveries/s; per delivery: Redis %.1f commands, %.2f round trips, %.0f µs CPU; server CPU %s%s; %s CPU %.0f µs; peak RSS %s%s\n",
		name, r.PerSec, r.Redis.CommandsPerDelivery, r.Redis.RoundTripsPerDelivery, r.Redis.CPUUsecPerDelivery,
		cpuText(r.ServerCPU), summed(len(r.Processes), r.ServerCPU), harness, r.HarnessCPU, rssText(r.PeakRSSMiB), summed(len(r.Processes), r.PeakRSSMiB))
	fmt.Fprintf(w, "     top Redis commands: %s\n", topText(r.Redis.Top))
	fmt.Fprintf(w, "     Redis time, µs: %s\n", topText(r.Redis.TopTime))
	if len(r.Redis.Masters) > 1 {
		fmt.Fprintf(w, "     per master: %s\n", mastersText(r.Redis.Masters))
	}
	if len(r.Processes) > 1 {
		fmt.Fprintf(w, "     processes: %s\n", procsText(r.Processes))
	}
}

// summed marks a figure v summed over n processes (none when v is n/a).
func summed(n int, v float64) string {
	if n > 1 && v != 0 {
		return fmt.Sprintf(" (%d processes summed)", n)
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func shardsText(n int) string {
	if n == 0 {
		return "queue shards unknown"
	}
	return plural(n, "queue shard", "queue shards") + " per lane"
}

// mastersText is each master's commands, round trips and CPU per delivery.
func mastersText(ms []NodeCost) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s %.1f cmds, %.2f rt, %.0f µs", m.Addr, m.CommandsPerDelivery, m.RoundTripsPerDelivery, m.CPUUsecPerDelivery)
	}
	return strings.Join(parts, "; ")
}

// procsText is each process's CPU, peak RSS and, when known, deliveries.
func procsText(ps []ProcStats) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name
		if p.CPUSeconds > 0 || p.PeakRSSMiB > 0 {
			parts[i] += fmt.Sprintf(" CPU %.2fs, peak RSS %.0f MiB", p.CPUSeconds, p.PeakRSSMiB)
		}
		if p.Delivered != nil {
			parts[i] += fmt.Sprintf(" delivered %d", *p.Delivered)
		}
	}
	return strings.Join(parts, "; ")
}

// adversaryText is what the endpoint did to the sender, and what the
// sender saw of it (the worker's answers by status; "error": none came).
func adversaryText(s *SubReport) string {
	var b strings.Builder
	st := s.Stats
	if st.RetryAfterSent+st.Armed > 0 {
		fmt.Fprintf(&b, "; %d 429s with Retry-After, %d deadlines armed (ban %s)", st.RetryAfterSent, st.Armed, st.BanFor)
	}
	if s.ThrottledPerMin > 0 {
		fmt.Fprintf(&b, "; %.1f 429s a minute, %.1f after the first %s", s.ThrottledPerMin, s.SettledThrottledPerMin, settleAfter)
	}
	if st.Resets+st.Failed > 0 {
		fmt.Fprintf(&b, "; endpoint reset %d, 5xx %d", st.Resets, st.Failed)
	}
	if st.Gone > 0 {
		fmt.Fprintf(&b, "; 410 ×%d", st.Gone)
	}
	if !st.UpAt.IsZero() {
		fmt.Fprintf(&b, "; up at %s", clock(st.UpAt))
	}
	var answers []string
	for k, v := range s.Worker {
		if code, ok := strings.CutPrefix(k, "http:"); ok {
			answers = append(answers, fmt.Sprintf("%s×%d", code, v))
		}
	}
	if len(answers) > 0 {
		slices.Sort(answers)
		fmt.Fprintf(&b, "; worker saw %s", strings.Join(answers, " "))
	}
	return b.String()
}

// steadyText shows "-" for a subscriber that never had a second's worth
// of backlog, whose steady rate is only its arrival rate.
func steadyText(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r)
}

func roundsText(rs []PathResult) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f", r.PerSec)
	}
	return strings.Join(parts, ", ")
}

func orDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func drainText(st Step) string {
	if !st.Recovered {
		return "NOT within the step"
	}
	return fmt.Sprintf("%.0fs", st.DrainS)
}

func cpuText(us float64) string {
	if us == 0 {
		return "n/a (in-process)"
	}
	return fmt.Sprintf("%.0f µs", us)
}

func rssText(mib float64) string {
	if mib == 0 {
		return "n/a (in-process)"
	}
	return fmt.Sprintf("%.0f MiB", mib)
}

func topText(top []CmdShare) string {
	parts := make([]string, len(top))
	for i, c := range top {
		parts[i] = fmt.Sprintf("%s %.2f", c.Cmd, c.PerDelivery)
	}
	return strings.Join(parts, ", ")
}
