package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
)

// A dead letter's task stays in asynq's archive, where asynqmon shows it.
// Its Run button (asynq's Inspector.RunTask) moves the task back to
// pending, payload and id unchanged, around hooklane: the run of it finds
// its delivery dead. An operator who ran it asked for it to be sent
// again, so that run replays the dead letter (ReplayRun) and goes on with
// the delivery as any other. Every other run that finds its delivery dead
// is archived again, sending nothing: the copy left by a run whose worker
// died between the dead state's commit and asynq's archive. What tells
// the two apart is asynq's own record of the task: a task run from the
// archive was last answered with SkipRetry (hooklane's dead-letter
// answer, by which asynq archived it), no earlier than its ledger entry
// died; a task asynq took back from a dead worker was last failed by
// asynq itself (ErrLeaseExpired), or not at all.

// ReplayRun replays, for the run of task taskID in queue that found its
// delivery dead, the dead letter whose archived task an operator ran
// (asynqmon's Run): as Replay does — the subscriber's generation checked,
// the ledger entry claimed, booked again with a fresh attempt list, the
// entry marked replayed — except that nothing is enqueued: the running
// task is the replay's hand-out, and its run goes on to admit the
// delivery through the gates (held behind an open breaker, it is parked
// and the task let go; the turn that hands it out enqueues it again).
//
// ran is false, nothing done, when the task was not run from the archive
// (see above): its run archives it, sending nothing. With ran, an
// outcome Failed says why it is not replayed (no ledger entry, the
// subscriber created again since, a Redis failure): its run archives it
// again with that reason as its last error.
func (p *Producer) ReplayRun(ctx context.Context, queue, taskID string) (o ReplayOutcome, ran bool) {
	o = ReplayOutcome{TaskID: taskID, Outcome: Failed}
	info, err := p.inspector.GetTaskInfo(queue, taskID)
	if err != nil {
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			return o, false
		}
		o.Error = fmt.Sprintf("%v: reading task %s: %v", ErrRedisUnavailable, taskID, err)
		return o, true
	}
	if !strings.HasSuffix(info.LastErr, asynq.SkipRetry.Error()) {
		return o, false
	}
	entries, err := p.readEntries(ctx, []string{taskID}, nil, DeadLetterQuery{IncludeReplayed: true})
	switch {
	case err != nil:
		o.Error = err.Error()
		return o, true
	case len(entries) == 0:
		o.Error = fmt.Sprintf("%v: %s has no dead-letter entry (deleted, or past its retention): not replayed; "+
			"resend it (POST /v1/subscribers/{id}/deliveries/{event}/resend) or publish it again", ErrUnknownDeadLetter, taskID)
		return o, true
	}
	e := entries[0]
	// asynq's time is in whole seconds, the entry's in ms, both of the
	// worker that committed the death and then had asynq archive it.
	if info.LastFailedAt.Unix() < e.DeadAt.Unix() {
		return o, false // archived before this death: a copy of the run that died
	}
	if !e.ReplayedAt.IsZero() {
		o.Outcome, o.Error = Duplicate, "replayed already"
		return o, true
	}
	return p.replayOne(ctx, e, bookRun), true
}

// freeArchived deletes task id's archived copy in queue, if it is
// archived: the dead letter was booked again (the ledger entry is marked
// replayed). A task of the id in another state (handed out again in that
// queue, run by an operator meanwhile) is left to run the delivery.
func (p *Producer) freeArchived(queue, id string) error {
	if queue == "" {
		return nil // an entry of a release that did not name it
	}
	info, err := p.inspector.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return nil
	}
	if err == nil && info.State == asynq.TaskStateArchived {
		err = p.inspector.DeleteTask(queue, id)
	}
	if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return fmt.Errorf("%w: replayed, but its archived task %s is still in asynq's archive: %v", ErrRedisUnavailable, id, err)
	}
	return nil
}
