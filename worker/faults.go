package worker

import "context"

// Fault points: the durable transitions of one delivery in a worker, by
// name, so that a test can stop the process just before or after one (a
// real kill -9) or lose the step's Redis reply, as etcd's failpoints do.
// deploy/GUARANTEES.md's fault-point table lists what a stop at each costs; the
// fault-point test (faultpoints_test.go) walks every row.
//
// The release build has no switch: FaultHook is nil there and a point
// costs one nil check. The root package's test binary, which the
// worker-process tests run as the hooklane command, sets it from
// HOOKLANE_FAULT (main_test.go).
const (
	FaultTurn       = "turn"        // a dispatcher's turn handed deliveries out (limits.Turn)
	FaultEnqueue    = "enqueue"     // a hand-out's task enqueued (producer.HandOut)
	FaultAdmit      = "admit"       // a run took its delivery (limits.Admit)
	FaultRequest    = "request"     // the request is about to be sent
	FaultResponse   = "response"    // the response's headers were read
	FaultCooldown   = "cooldown"    // a 429's cooldown written (limits.Gates.Cooldown)
	FaultPark       = "park"        // a run that found no slot parked its delivery (limits.Gates.Park)
	FaultCommit     = "commit"      // the outcome committed (limits.Commit)
	FaultReadyWrite = "ready_write" // the ready index told (limits.Gates.Notify)
	FaultDone       = "done"        // the handler is about to answer asynq
)

// FaultPoints lists the points in a delivery's order.
var FaultPoints = []string{FaultTurn, FaultEnqueue, FaultAdmit, FaultRequest, FaultResponse, FaultCooldown, FaultPark,
	FaultCommit, FaultReadyWrite, FaultDone}

// FaultHook, when set (by tests only), runs at every fault point: step is
// the point's own work (nil for a point that is a moment, not a write), and
// what the hook returns is the step's result.
var FaultHook func(ctx context.Context, point string, step func() error) error

// fault runs step at point through FaultHook, if one is set.
func fault(ctx context.Context, point string, step func() error) error {
	if FaultHook == nil {
		if step == nil {
			return nil
		}
		return step()
	}
	return FaultHook(ctx, point, step)
}
