package testkit

import (
	"slices"
	"testing"

	"github.com/hibiken/asynq"
)

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

// State names a task's state, or why it could not be read: for messages
// about a task that may be missing.
func State(info *asynq.TaskInfo, err error) string {
	if err != nil {
		return "unreadable (" + err.Error() + ")"
	}
	return info.State.String() + " (" + info.LastErr + ")"
}
