package loadtest

import (
	"fmt"
	"io"
	"strings"
)

// summary writes the trickle comparison: each path's median round by CPU,
// every round's CPU, hooklane's handler runs and latency, and the ratio.
func (t *Trickle) summary(w io.Writer) {
	const harness = "harness (publisher + receiver)"
	pathText(w, "floor (plain asynq + POST, 1 Server; tasks enqueued by the harness)", t.Floor, harness)
	pathText(w, fmt.Sprintf("hooklane (%s; events published by the harness' producer)", plural(len(t.Hooklane.Processes), "worker", "workers")), t.Hooklane, harness)
	fmt.Fprintf(w, "   rounds (CPU µs per delivery): floor %s; hooklane %s\n", cpuRoundsText(t.FloorRounds), cpuRoundsText(t.HooklaneRounds))
	fmt.Fprintf(w, "   hooklane: %.3f handler runs per delivery; publish → delivery p50 %.0fms, p99 %.0fms, max %.0fms over %d events\n",
		t.RunsPerDelivery, t.Latency.P50, t.Latency.P99, t.Latency.Max, t.Latency.N)
	if t.CPURatio > 0 {
		fmt.Fprintf(w, "   CPU per delivery (Redis + server + publisher and receiver), median rounds: hooklane %.0f µs, floor %.0f µs: %.2f× the floor's\n",
			t.Hooklane.CPU(), t.Floor.CPU(), t.CPURatio)
	}
}

// cpuRoundsText is each round's CPU per delivery ("n/a" in-process).
func cpuRoundsText(rs []PathResult) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = "n/a"
		if c := r.CPU(); c > 0 {
			parts[i] = fmt.Sprintf("%.0f", c)
		}
	}
	return strings.Join(parts, ", ")
}

// maxListed is the most subscribers the summary lists one by one.
const maxListed = 20

// subscribersSum is one line for many subscribers (the trickle scenario's
// thousand): what their endpoints saw, summed, and the worst latency; a
// broken invariant is still a FAIL line of its own.
func subscribersSum(w io.Writer, subs []*SubReport) {
	var requests, throttled, early, bans, banned, badSig int
	var worst *SubReport
	for _, s := range subs {
		requests += s.Requests
		throttled += s.Stats.Throttled
		early += s.Stats.Early
		bans += s.Stats.Bans
		banned += s.Stats.Banned
		badSig += s.Stats.BadSig
		if worst == nil || s.Latency.P99 > worst.Latency.P99 {
			worst = s
		}
	}
	fmt.Fprintf(w, "   %d subscribers (each in report.json): %d requests, 429 %d, early %d, bans %d, 403 %d, bad signatures %d",
		len(subs), requests, throttled, early, bans, banned, badSig)
	if worst != nil {
		fmt.Fprintf(w, "; worst p99 publish → delivery %.0fms (%s)", worst.Latency.P99, worst.ID)
	}
	fmt.Fprintln(w)
}
