package tasks

import (
	"encoding/json"
	"strconv"

	"github.com/hibiken/asynq"
)

// BatchVersion is the payload version of a batch: several deliveries of
// one subscriber that a turn handed out together, run by one task
// ({"v":4,"subscriber_id","event_ids":[…]}). Each delivery keeps its own
// record, its own outcome and, once dead, its own archived task of the
// single-delivery shape (TaskVersion, TaskID). A worker of the release
// before reads version 4 as a later release's task and puts it back
// unsent (ErrNewerTask), so a rolling deploy delays a batch, never loses
// it.
const BatchVersion = 4

// MaxBatch is the most deliveries one batch task carries (the worker's
// HOOKLANE_BATCH_MAX is at most this).
const MaxBatch = 100

// BatchTaskID is the asynq task id of one hand-out of a batch: the
// subscriber, its first delivery's event id, its size and the hand-out's
// nonce, joined by '+', which no event id holds, so that it is never a
// single delivery's TaskID. The nonce makes each hand-out a task of its
// own: a delivery a batch's run parked and a turn hands out again first
// in a batch of the same size must not wait for the first batch's task
// to end (asynq refuses an id while its task exists). An enqueue the
// Redis client sends again is the same id: one task.
func BatchTaskID(sub string, eventIDs []string, nonce string) string {
	return TaskID(sub, eventIDs[0]) + "+" + strconv.Itoa(len(eventIDs)) + "+" + nonce
}

// NewBatchTask builds the task of subscriber sub's deliveries of events
// eventIDs (1 to MaxBatch). opts are passed to asynq; the caller adds
// TaskID, Queue and MaxRetry.
func NewBatchTask(sub string, eventIDs []string, opts ...asynq.Option) *asynq.Task {
	b, _ := json.Marshal(Delivery{V: BatchVersion, SubscriberID: sub, EventIDs: eventIDs}) // strings: cannot fail
	return asynq.NewTask(TypeDeliver, b, opts...)
}

// BatchMaxRetry is a batch task's MaxRetry: never reached. A batch is
// never dead-lettered as a whole (each of its deliveries counts its own
// attempts in its record, and one that dies is archived as a task of its
// own), and asynq's recoverer, which counts a lost lease as a retry,
// must not archive it after a few worker crashes.
const BatchMaxRetry = 1 << 20
