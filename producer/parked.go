package producer

import (
	"cmp"
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

// GateOf reads why a subscriber's parked deliveries wait now from its gate
// record (HGETALL of tasks.Keys.Gate), its cooldown key's value and Redis'
// now: the reads the status answer makes anyway.
func GateOf(rec map[string]string, cool string, now time.Time) tasks.Gate {
	_, paused := rec["paused"]
	g := tasks.Gate{Paused: paused, BreakerOpen: limits.ReadBreaker(rec, now).State != "closed"}
	if until := limits.ParseCooldown(cool); until.After(now) {
		g.CoolingUntil = until
	}
	return g
}

// gateReads are the reads GateOf needs, queued on a pipeline.
type gateReads struct {
	rec  *redis.MapStringStringCmd
	cool *redis.StringCmd
}

func (p *Producer) gateReadsIn(ctx context.Context, pl redis.Pipeliner, sub string) gateReads {
	k := p.keys.Gates(sub)
	return gateReads{rec: pl.HGetAll(ctx, k.Record), cool: pl.Get(ctx, k.Cooldown)}
}

// showParked sets a parked delivery's state to why it waits now
// (tasks.ParkedState); others are left as their record says. It is due at
// its next attempt once one is set, else at its due time.
func showParked(d *tasks.DeliveryRecord, g gateReads, now time.Time) {
	if tasks.Parked(d.State) {
		d.State = tasks.ParkedState(d.AttemptCount > 0, cmp.Or(d.NextAttempt, d.DueAt), GateOf(g.rec.Val(), g.cool.Val(), now))
	}
}
