package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// A run uses a cached copy of its subscriber's configuration for up to a
// minute, since Admit compares the copy's version with the configuration's
// and a changed one is read again before the request
// (TestGraceZeroRotationStopsTheOldSecretAtOnce); a copy without a
// version, and what no Admit checks (a dispatcher's turn, the rescuer),
// for up to a second. Before, every read kept a copy one second, and a
// subscriber with an event a second or less often had its configuration
// read again for most of its deliveries.
func TestRunsUseAVersionedConfigurationForAMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, err := New(Config{Redis: startRedis(t), Namespace: testkit.Namespace("subcache"), AllowedCIDRs: testkit.Loopback})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.closeRDB() })
	h := w.h
	// A copy cached age ago. Redis holds no configuration of "s": a copy
	// read again says it is deleted.
	cache := func(version string, age time.Duration) {
		h.subs.put(cachedSub{Subscriber: tasks.Subscriber{ID: "s"}, version: version})
		h.subs.mu.Lock()
		defer h.subs.mu.Unlock()
		e := h.subs.m["s"]
		e.at = e.at.Add(-age)
		h.subs.m["s"] = e
	}
	cache("v1", 2*time.Second)
	if s, err := h.subscriberToAdmit(ctx, "s"); err != nil || s.version != "v1" {
		t.Fatalf("a run's read of a copy 2 s old with a version: version %q, %v; want the copy", s.version, err)
	}
	if _, err := h.subscriber(ctx, "s", ""); !errors.Is(err, errDeleted) {
		t.Fatalf("a turn's read of a copy 2 s old: %v; want it read again (%v)", err, errDeleted)
	}
	cache("", 2*time.Second)
	if _, err := h.subscriberToAdmit(ctx, "s"); !errors.Is(err, errDeleted) {
		t.Fatalf("a run's read of a copy 2 s old without a version: %v; want it read again (%v)", err, errDeleted)
	}
	cache("v1", verifiedConfigAge+time.Second)
	if _, err := h.subscriberToAdmit(ctx, "s"); !errors.Is(err, errDeleted) {
		t.Fatalf("a run's read of a copy older than %v: %v; want it read again (%v)", verifiedConfigAge, err, errDeleted)
	}
}
