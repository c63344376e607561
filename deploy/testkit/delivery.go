package testkit

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// Ended reports how event eventID's delivery to subscriber sub ended, as a
// test counts it: asynq.TaskStateCompleted when its delivery record says
// delivered (asynq keeps nothing of a delivered task) or a task of the
// release before is completed, asynq.TaskStateArchived when it is dead;
// otherwise the state of its task (0 when there is none) and the task's
// last error.
func Ended(insp *asynq.Inspector, rdb redis.UniversalClient, ns, sub, eventID string) (asynq.TaskState, string, error) {
	st, err := rdb.HGet(context.Background(), tasks.Keys(ns).Delivery(sub, eventID), "s").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, "", err
	}
	info, terr := Task(insp, ns, tasks.TaskID(sub, eventID))
	switch {
	case st == tasks.StateDelivered && (terr != nil || info.State != asynq.TaskStateActive):
		return asynq.TaskStateCompleted, "", nil
	case terr == nil && (st == tasks.StateDead || info.State == asynq.TaskStateArchived):
		return asynq.TaskStateArchived, info.LastErr, nil
	case terr == nil:
		return info.State, info.LastErr, nil
	case errors.Is(terr, asynq.ErrTaskNotFound) && st != "" && st != tasks.StateDelivered && st != tasks.StateDead:
		// Parked in its subscriber's schedule, or handed out: waiting.
		return asynq.TaskStateScheduled, "in its subscriber's schedule, delivery record state " + st, nil
	case errors.Is(terr, asynq.ErrTaskNotFound):
		return 0, "task not found, delivery record state " + st, nil
	}
	return 0, "", terr
}
