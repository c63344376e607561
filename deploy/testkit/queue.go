package testkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// Totals sums the counts of namespace ns's queues (Size, Pending, Active,
// Scheduled, Retry, Archived, Completed, Aggregating).
func Totals(t testing.TB, insp *asynq.Inspector, ns string) asynq.QueueInfo {
	t.Helper()
	q, err := QueueInfo(insp, ns)
	if err != nil {
		t.Fatalf("reading the queues of %s: %v", ns, err)
	}
	return *q
}

// Idle reports whether namespace ns has nothing left to run.
func Idle(t testing.TB, insp *asynq.Inspector, ns string) bool {
	q := Totals(t, insp, ns)
	return q.Pending+q.Active+q.Scheduled+q.Retry+q.Aggregating == 0
}

// Task finds task id in namespace ns's queues.
func Task(insp *asynq.Inspector, ns, id string) (*asynq.TaskInfo, error) {
	all, err := insp.Queues()
	if err != nil {
		return nil, err
	}
	for _, q := range all {
		if !tasks.Keys(ns).OwnsQueue(q) {
			continue
		}
		info, err := insp.GetTaskInfo(q, id)
		if errors.Is(err, asynq.ErrTaskNotFound) {
			continue
		}
		return info, err
	}
	return nil, asynq.ErrTaskNotFound
}

// State names a task's state, or why it could not be read: for messages
// about a task that may be missing.
func State(info *asynq.TaskInfo, err error) string {
	if err != nil {
		return "unreadable (" + err.Error() + ")"
	}
	return info.State.String() + " (" + info.LastErr + ")"
}

// QueueInfo is Totals as asynq's Inspector answers: the sum of namespace
// ns's queues (zero when none exists yet).
func QueueInfo(insp *asynq.Inspector, ns string) (*asynq.QueueInfo, error) {
	all, err := insp.Queues()
	if err != nil {
		return nil, err
	}
	sum := &asynq.QueueInfo{Queue: ns}
	for _, q := range all {
		if !tasks.Keys(ns).OwnsQueue(q) {
			continue
		}
		i, err := insp.GetQueueInfo(q)
		if err != nil {
			return nil, err
		}
		sum.Size += i.Size
		sum.Pending += i.Pending
		sum.Active += i.Active
		sum.Scheduled += i.Scheduled
		sum.Retry += i.Retry
		sum.Archived += i.Archived
		sum.Completed += i.Completed
		sum.Aggregating += i.Aggregating
		sum.Paused = sum.Paused || i.Paused
	}
	return sum, nil
}

// QueueSize is how many tasks queue holds in any state; a queue asynq
// never saw (no task was ever enqueued) holds none.
func QueueSize(t testing.TB, insp *asynq.Inspector, queue string) int {
	t.Helper()
	// asynq's "no such queue" error is of an internal type: ask for the list.
	queues, err := insp.Queues()
	if err != nil {
		t.Fatalf("listing queues: %v", err)
	}
	if !slices.Contains(queues, queue) {
		return 0
	}
	q, err := insp.GetQueueInfo(queue)
	if err != nil {
		t.Fatalf("reading queue %s: %v", queue, err)
	}
	return q.Size
}

// Parked is how many of namespace ns's deliveries wait in their
// subscribers' schedules (parked in a lot, handed to asynq and not yet
// taken, or taken by a run that has not committed): what asynq's queues
// do not show.
func Parked(ctx context.Context, rdb redis.UniversalClient, ns string) (int64, error) {
	keys := tasks.Keys(ns)
	ids, err := rdb.ZRange(ctx, keys.SubscriberIDs(), 0, -1).Result()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, id := range ids {
		k := keys.Gates(id)
		lot, err := rdb.ZCard(ctx, k.Lot).Result()
		if err != nil {
			return 0, err
		}
		out, err := rdb.ZCard(ctx, k.Out).Result()
		if err != nil {
			return 0, err
		}
		runs, err := rdb.ZCard(ctx, k.Runs).Result()
		if err != nil {
			return 0, err
		}
		n += lot + out + runs
	}
	return n, nil
}

// Settled reports whether namespace ns has nothing left to run: its
// queues and its subscribers' schedules are empty.
func Settled(t testing.TB, rdb redis.UniversalClient, insp *asynq.Inspector, ns string) bool {
	q, err := QueueInfo(insp, ns)
	if err != nil || q.Pending+q.Active+q.Scheduled+q.Retry+q.Aggregating != 0 {
		return false
	}
	n, err := Parked(context.Background(), rdb, ns)
	return err == nil && n == 0
}

// Leftover says what namespace ns has left to run ("" nothing): its
// queues' counts, with each task left in them (its state and id, the
// retry set's with when it runs and its last error), and each entry of
// its subscribers' lots, hand-outs and runs, for a test's failure to name.
func Leftover(ctx context.Context, rdb redis.UniversalClient, insp *asynq.Inspector, ns string) string {
	var b strings.Builder
	queues, err := insp.Queues()
	if err != nil {
		return "reading the queues: " + err.Error()
	}
	for _, q := range queues {
		if !tasks.Keys(ns).OwnsQueue(q) {
			continue
		}
		for _, l := range []struct {
			state string
			list  func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)
		}{{"pending", insp.ListPendingTasks}, {"active", insp.ListActiveTasks}, {"scheduled", insp.ListScheduledTasks}, {"retry", insp.ListRetryTasks}} {
			ts, err := l.list(q, asynq.PageSize(20))
			if err != nil {
				fmt.Fprintf(&b, "%s %s: %v; ", q, l.state, err)
			}
			for _, ti := range ts {
				fmt.Fprintf(&b, "%s %s task %s (retried %d, next %s, last error %q); ", q, l.state, ti.ID, ti.Retried,
					ti.NextProcessAt.Format("15:04:05.000"), ti.LastErr)
			}
		}
	}
	keys := tasks.Keys(ns)
	ids, err := rdb.ZRange(ctx, keys.SubscriberIDs(), 0, -1).Result()
	if err != nil {
		return b.String() + "reading the subscribers: " + err.Error()
	}
	for _, id := range ids {
		k := keys.Gates(id)
		// where its next turn comes from: the ready index, a claim, the
		// gate's own record of turns (wr, wk, ta) and what holds it back
		ready, claimed := rdb.ZScore(ctx, keys.Ready(""), id), rdb.ZScore(ctx, keys.Claimed(""), id)
		if ready.Err() == nil || claimed.Err() == nil {
			fmt.Fprintf(&b, "%s ready %s claimed %s; ", id, msAt(ready), msAt(claimed))
		}
		fields := []string{"wr", "wk", "ta", "paused", "b_open", "b_next", "b_probe", "b_pe"}
		if vs, err := rdb.HMGet(ctx, k.Record, fields...).Result(); err == nil {
			for i, v := range vs {
				if v != nil {
					fmt.Fprintf(&b, "%s %s=%v; ", id, fields[i], v)
				}
			}
		}
		for _, s := range []struct{ name, key string }{{"lot", k.Lot}, {"out", k.Out}, {"runs", k.Runs}} {
			zs, err := rdb.ZRangeWithScores(ctx, s.key, 0, 19).Result()
			if err != nil {
				fmt.Fprintf(&b, "%s %s: %v; ", id, s.name, err)
			}
			for _, z := range zs {
				fmt.Fprintf(&b, "%s %s %v at %s; ", id, s.name, z.Member, time.UnixMilli(int64(z.Score)).Format("15:04:05.000"))
			}
		}
	}
	return b.String()
}

// msAt is a sorted set's score read as Unix ms, on the wall clock, or
// "none".
func msAt(c *redis.FloatCmd) string {
	if c.Err() != nil {
		return "none"
	}
	return time.UnixMilli(int64(c.Val())).Format("15:04:05.000")
}
