package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/hooklane/hooklane/limits"
)

// legacy is a task of the release before for event ev of "s" (generation
// g1), its horizon 2h from now.
func legacy(ev string) limits.Legacy {
	now := time.Now()
	return limits.Legacy{EventID: ev, Gen: "g1", Type: "t", TaskID: "s:" + ev, MaxAttempts: 3, Published: now, Due: now,
		Expires: now.Add(2 * time.Hour), Dedup: time.Hour}
}

// A task of the release before run again after its first run adopted it
// (the worker died before asynq let it go) finds the delivery this
// release's: in flight under a live run, or parked, it is left as it is,
// so the run keeps it and its outcome counts.
func TestAdoptLeavesThisReleasesDeliveryAlone(t *testing.T) {
	b, ctx := setup(t), context.Background()
	a, err := b.g.Adopt(ctx, b.k, legacy("e1"))
	if err != nil || a.Due.IsZero() || a.Owned {
		t.Fatalf("first adoption: %+v, %v; want adopted", a, err)
	}
	tok := limits.NewToken()
	if adm := b.admit(t, "e1", tok); !adm.Admitted {
		t.Fatalf("the adopted delivery's run: %+v", adm)
	}
	a, err = b.g.Adopt(ctx, b.k, legacy("e1"))
	if b.rec(t, "e1", "tk") != tok || b.rec(t, "e1", "s") != "in_flight" || b.score(b.k.Lot, "e1") != -1 {
		t.Fatalf("record %v, lot %v; want the live run's, in flight, not parked", b.rdb.HGetAll(ctx, b.k.Deliveries+"e1").Val(), b.score(b.k.Lot, "e1"))
	}
	if err != nil || !a.Owned || !a.Parked.IsZero() {
		t.Fatalf("adopted again while in flight: %+v, %v; want owned, not parked", a, err)
	}
	if c := b.commit(t, "e1", tok, limits.Outcome{Kind: limits.OutcomeDelivered, DeliveredAt: time.Now(), Answered: true}); c.Superseded {
		t.Fatal("the live run's 2xx was superseded by the adoption")
	}

	// Parked by this release (adopted, not handed out yet): the reply says
	// when, for the dispatcher; nothing moves.
	first, _ := b.g.Adopt(ctx, b.k, legacy("e2"))
	a, err = b.g.Adopt(ctx, b.k, legacy("e2"))
	if err != nil || !a.Owned || !a.Parked.Equal(first.Due) || b.score(b.k.Lot, "e2") != float64(first.Due.UnixMilli()) {
		t.Fatalf("adopted again while parked: %+v, %v; want owned, parked at %v", a, err, first.Due)
	}
	// Booked by this release: the same.
	b.book(t, "e3")
	if a, err = b.g.Adopt(ctx, b.k, legacy("e3")); err != nil || !a.Owned {
		t.Fatalf("a task of the release before of a delivery this release booked: %+v, %v; want owned", a, err)
	}
}

// An adopted record lives as a booked one does: until its horizon + the
// dedup window, not a fixed day.
func TestAdoptedRecordLivesUntilItsHorizonAndDedup(t *testing.T) {
	b, ctx := setup(t), context.Background()
	if a, err := b.g.Adopt(ctx, b.k, legacy("e1")); err != nil || a.Due.IsZero() {
		t.Fatalf("%+v, %v", a, err)
	}
	ttl := b.rdb.PTTL(ctx, b.k.Deliveries+"e1").Val()
	if want := 3 * time.Hour; ttl < want-time.Minute || ttl > want {
		t.Fatalf("adopted record lives %v; want its horizon (2h) + the dedup window (1h)", ttl)
	}
}
