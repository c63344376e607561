package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/hooklane/hooklane/producer"
)

// warmUp registers a fast subscriber id of event type typ with p (left
// out of the figures and of collect), publishes n events to it at once
// and waits for their delivery, so that a scenario's first phase meets
// the worker's Servers running. A worker's lane runs one asynq Server
// while idle, which finds a task within 0.5-1.5 × its PollInterval
// (500ms), and starts its others, one polling every 20ms, once two of its
// tasks run at once, for a minute after the last (worker/servers.go).
// Without it the tenants scenario's small tenant's events alone waited up
// to 620ms for that poll while the big tenant's traffic, starting the
// others, sped them up, and the viral dashboard's control burst read p50
// 12 to 501 ms from run to run: a phase compared with another is to
// differ by the traffic only.
func (e *env) warmUp(ctx context.Context, p *producer.Producer, id, typ string, n int) error {
	if err := e.register(ctx, p, fastSub(id, typ, "warm-up")); err != nil {
		return err
	}
	was := e.recv.Count(id)
	gen := &Generator{P: p, Ledger: newLedger()} // a ledger of its own: not collected
	if gs := gen.Run(ctx, time.Now(), burst(id, typ, n, 0, 0), false); gs.Failed > 0 {
		return fmt.Errorf("%d of the %d warm-up events failed to publish", gs.Failed, gs.Planned)
	}
	if !waitFor(ctx, e.cfg.Timeout, func() bool { return e.recv.Count(id) >= was+n }) {
		return fmt.Errorf("the warm-up events were not delivered within %s", e.cfg.Timeout)
	}
	return nil
}
