package worker_test

// The chaos run's look into Redis: where each delivery that did not end
// is stuck (its record, its subscriber's schedule, its asynq task), the
// rescuer's counts, and the short run's shortcut past asynq's lease
// recovery.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// chaosDelivery is one (subscriber, event) of the run.
type chaosDelivery struct{ sub, event string }

// recordStates reads the state field (s) of every delivery's record, in
// one pipeline; "" when the record is missing.
func recordStates(ctx context.Context, rdb redis.UniversalClient, ns string, ds []chaosDelivery) ([]string, error) {
	keys := tasks.Keys(ns)
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ds))
	for i, d := range ds {
		cmds[i] = pipe.HGet(ctx, keys.Delivery(d.sub, d.event), "s")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]string, len(ds))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

func final(state string) bool { return state == tasks.StateDelivered || state == tasks.StateDead }

// shortenRecovery stands in for the time asynq's lease recovery and
// hooklane's leases take, for the short run, whose budget cannot wait them
// out: with every worker killed and nothing in flight at the receiver, it
// moves namespace ns's asynq leases a minute into the past (the next
// worker's recoverer, which looks as it starts, takes the tasks back), and
// lapses subscribers' in-flight slots (no run owns one: every worker is
// dead). It moves the hand-out leases (out), the runs' entries and the
// ready index's times
// (and their claims) back by by, as if that time had passed: it adds and
// removes no entry, so a ready-index write that was lost stays lost.
func shortenRecovery(t testing.TB, rdb redis.UniversalClient, insp *asynq.Inspector, ns string, subs []string, by time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys := tasks.Keys(ns)
	queues, err := insp.Queues()
	if err != nil {
		t.Fatal(err)
	}
	past := float64(time.Now().Add(-time.Minute).Unix())
	for _, q := range queues {
		if !keys.OwnsQueue(q) {
			continue
		}
		lease := "asynq:{" + q + "}:lease" // as expireLeases
		for _, m := range rdb.ZRange(ctx, lease, 0, -1).Val() {
			rdb.ZAddXX(ctx, lease, redis.Z{Score: past, Member: m})
		}
	}
	shift := func(key string) {
		for _, z := range rdb.ZRangeWithScores(ctx, key, 0, -1).Val() {
			rdb.ZAddXX(ctx, key, redis.Z{Score: z.Score - float64(by.Milliseconds()), Member: z.Member})
		}
	}
	for _, sub := range subs {
		g := keys.Gates(sub)
		for _, m := range rdb.ZRange(ctx, g.InFlight, 0, -1).Val() {
			rdb.ZAddXX(ctx, g.InFlight, redis.Z{Score: 1, Member: m})
		}
		shift(g.Out)
		shift(g.Runs) // a killed run waiting for its rate slot holds its delivery until its entry lapses
	}
	shift(keys.Ready(""))
	shift(keys.Claimed(""))
}

// rescuedCounts reads the rescuer's counters (fields rescued:<reason> of
// the namespace's counters or totals, as /metrics' hooklane_rescued_total
// would export them), or says n/a when this build has none.
func rescuedCounts(ctx context.Context, rdb redis.UniversalClient, ns string) string {
	keys := tasks.Keys(ns)
	counts := map[string]string{}
	for _, key := range []string{keys.Counters(), keys.Totals()} {
		h, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return "n/a (" + err.Error() + ")"
		}
		for f, v := range h {
			if reason, ok := strings.CutPrefix(f, "rescued:"); ok {
				counts[reason] = v
			}
		}
	}
	if len(counts) == 0 {
		return "n/a (no rescued:<reason> counter in Redis: this build has no rescuer, or it rescued nothing)"
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, r+"="+counts[r])
	}
	return strings.Join(parts, " ")
}

// stuckReport describes the deliveries that did not end: first a count
// per path (record state, in the lot or the hand-outs or neither, asynq
// task state), then up to perPath of each in full: the record's fields,
// its subscriber's schedule entries for it, its task, its subscriber's
// slots, cooldown, breaker and ready-index entry, and the requests the
// receiver saw for it and the workers' log lines that name it.
func stuckReport(ctx context.Context, rdb redis.UniversalClient, insp *asynq.Inspector, ns string, stuck []chaosDelivery,
	hits map[string][]chaosHit, logs func(event string) []string, perPath int) string {
	keys := tasks.Keys(ns)
	paths := map[string][]string{}
	for _, d := range stuck {
		g := keys.Gates(d.sub)
		rec := rdb.HGetAll(ctx, keys.Delivery(d.sub, d.event)).Val()
		lot, lotErr := rdb.ZScore(ctx, g.Lot, d.event).Result()
		out, outErr := rdb.ZScore(ctx, g.Out, d.event).Result()
		where := "neither lot nor out"
		switch {
		case lotErr == nil && outErr == nil:
			where = "in lot and out"
		case lotErr == nil:
			where = "in lot"
		case outErr == nil:
			where = "in out"
		}
		info, terr := testkit.Task(insp, ns, tasks.TaskID(d.sub, d.event))
		task := "no task"
		if terr == nil {
			task = "task " + info.State.String()
		} else if !errors.Is(terr, asynq.ErrTaskNotFound) {
			task = "task unreadable: " + terr.Error()
		}
		path := fmt.Sprintf("state=%s, %s, %s", cmpState(rec["s"]), where, task)
		if final(rec["s"]) {
			path = "ended since the drain's last look: " + path
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %s / %s\n    record: %s\n", d.sub, d.event, recordFields(rec))
		if lotErr == nil {
			fmt.Fprintf(&b, "    lot: due %s\n", msTime(lot))
		}
		if outErr == nil {
			fmt.Fprintf(&b, "    out: lease ends %s\n", msTime(out))
		}
		if s, err := rdb.ZScore(ctx, g.Fresh, d.event).Result(); err == nil {
			fmt.Fprintf(&b, "    fresh: next look %s\n", msTime(s))
		}
		if terr == nil {
			fmt.Fprintf(&b, "    task: %s in %s, retried %d, next %s, last error %q\n", info.State, info.Queue, info.Retried,
				info.NextProcessAt.Format("15:04:05.000"), info.LastErr)
		}
		fmt.Fprintf(&b, "    subscriber: %s\n", subscriberState(ctx, rdb, ns, d.sub))
		fmt.Fprintf(&b, "    receiver: %s\n", hitsOf(hits[d.sub+"/"+d.event]))
		for _, l := range logs(d.event) {
			fmt.Fprintf(&b, "    log: %s\n", l)
		}
		paths[path] = append(paths[path], b.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d deliveries not final, by path (record state, schedule, asynq task):\n", len(stuck))
	order := slices.SortedFunc(maps.Keys(paths), func(x, y string) int { return len(paths[y]) - len(paths[x]) })
	for _, p := range order {
		fmt.Fprintf(&b, "  %5d  %s\n", len(paths[p]), p)
	}
	for _, p := range order {
		fmt.Fprintf(&b, "%s (%d; up to %d shown):\n", p, len(paths[p]), perPath)
		for _, s := range paths[p][:min(perPath, len(paths[p]))] {
			b.WriteString(s)
		}
	}
	return b.String()
}

func cmpState(s string) string {
	if s == "" {
		return "(no record)"
	}
	return s
}

// recordFields lists a record's fields but its attempts, then the last
// three attempts (field a:<ms>), oldest first.
func recordFields(rec map[string]string) string {
	var parts, atts []string
	for _, f := range slices.Sorted(maps.Keys(rec)) {
		if strings.HasPrefix(f, "a:") {
			atts = append(atts, f)
			continue
		}
		v := rec[f]
		if len(v) == 13 && (f == "p" || f == "u" || f == "x" || f == "nx" || f == "dl") {
			v += " (" + msTimeString(v) + ")"
		}
		parts = append(parts, f+"="+v)
	}
	slices.SortFunc(atts, func(a, b string) int { return strings.Compare(a, b) }) // same length: by time
	s := strings.Join(parts, " ")
	if len(atts) > 0 {
		s += fmt.Sprintf("; %d attempts, last:", len(atts))
		for _, f := range atts[max(len(atts)-3, 0):] {
			s += " " + msTimeString(f[2:]) + "=" + rec[f]
		}
	}
	return s
}

// subscriberState is a subscriber's delivery state: its in-flight slots,
// cooldown, breaker, ready-index entry and claim, lot and hand-out sizes.
func subscriberState(ctx context.Context, rdb redis.UniversalClient, ns, sub string) string {
	keys := tasks.Keys(ns)
	g := keys.Gates(sub)
	var slots []string
	for _, z := range rdb.ZRangeWithScores(ctx, g.InFlight, 0, -1).Val() {
		slots = append(slots, fmt.Sprintf("%v→%s", z.Member, msTime(z.Score)))
	}
	breaker := map[string]string{}
	for f, v := range rdb.HGetAll(ctx, g.Record).Val() {
		if strings.HasPrefix(f, "b_") || f == "paused" {
			breaker[f] = v
		}
	}
	ready, rerr := rdb.ZScore(ctx, keys.Ready(""), sub).Result()
	claim, cerr := rdb.ZScore(ctx, keys.Claimed(""), sub).Result()
	cooldown := "none"
	if v, err := rdb.Get(ctx, g.Cooldown).Result(); err == nil {
		cooldown = "until " + msTimeString(v)
	}
	s := fmt.Sprintf("slots %v, cooldown %s, gate %v, lot %d, out %d, fresh %d", slots, cooldown, breaker,
		rdb.ZCard(ctx, g.Lot).Val(), rdb.ZCard(ctx, g.Out).Val(), rdb.ZCard(ctx, g.Fresh).Val())
	if rerr == nil {
		s += ", ready at " + msTime(ready)
	} else {
		s += ", not in the ready index"
	}
	if cerr == nil {
		s += ", claimed until " + msTime(claim)
	}
	return s
}

func hitsOf(hs []chaosHit) string {
	if len(hs) == 0 {
		return "no request"
	}
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s→%d", h.at.Format("15:04:05.000"), h.status))
	}
	return strings.Join(parts, " ")
}

func msTime(ms float64) string {
	return time.UnixMilli(int64(ms)).Format("15:04:05.000")
}

func msTimeString(ms string) string {
	var n int64
	if _, err := fmt.Sscan(ms, &n); err != nil {
		return ms
	}
	return time.UnixMilli(n).Format("15:04:05.000")
}

// deferredCopies says when the last of the tasks left in namespace ns
// runs, if every one left is a copy of a delivery that another run owned
// when it ran (two tasks of one delivery after a kill, asynq's recovered
// copy and the rescuer's or a turn's: Admit's "a live run owns it" defers
// the second until the first's slot ends, up to a request's timeout and
// a wait ahead, and it then finds the delivery ended and drops). Anything
// else left, or a copy due more than a minute on, answers false.
func deferredCopies(insp *asynq.Inspector, ns string) (time.Time, bool) {
	q, err := testkit.QueueInfo(insp, ns)
	if err != nil || q.Retry == 0 || q.Retry > 100 || q.Pending+q.Active+q.Scheduled+q.Aggregating != 0 {
		return time.Time{}, false
	}
	queues, err := insp.Queues()
	if err != nil {
		return time.Time{}, false
	}
	var last time.Time
	for _, name := range queues {
		if !tasks.Keys(ns).OwnsQueue(name) {
			continue
		}
		ts, err := insp.ListRetryTasks(name, asynq.PageSize(100))
		if err != nil {
			return time.Time{}, false
		}
		for _, ti := range ts {
			if !strings.Contains(ti.LastErr, "a live run owns the delivery") || ti.NextProcessAt.After(time.Now().Add(time.Minute)) {
				return time.Time{}, false
			}
			if ti.NextProcessAt.After(last) {
				last = ti.NextProcessAt
			}
		}
	}
	return last, !last.IsZero()
}
