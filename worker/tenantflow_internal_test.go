package worker

import (
	"context"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
)

// A registered tenant's turns count their hand-outs in its flow, which
// expires a second after its first; past the rate its turns are told to
// flood (the backlog lane); the default tenant is never counted.
func TestTenantFlowsCountTurnsAndExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := startRedis(t)
	keys := tasks.Keys(testkit.Namespace("flows"))
	f := newTenantFlows(rdb, keys, 10)
	if f.flooding(ctx, "big/s1") {
		t.Fatal("flooding before any hand-out")
	}
	f.add(ctx, "big/s1", 6)
	// at most a second to live (gone already, after a long pause, says so too)
	if ttl := rdb.PTTL(ctx, keys.TenantFlow("big")).Val(); ttl == -1 || ttl > time.Second {
		t.Fatalf("the flow's TTL %v; want at most a second", ttl)
	}
	rdb.Set(ctx, keys.TenantFlow("big"), 6, time.Minute) // the second lasts while the test looks
	if f.flooding(ctx, "big/s2") {
		t.Fatal("flooding at 6 of 10")
	}
	f.add(ctx, "big/s2", 4)
	if !f.flooding(ctx, "big/s3") {
		t.Fatal("not flooding at 10 of 10")
	}
	f.add(ctx, "s1", 100) // the default tenant's
	if f.flooding(ctx, "s1") || rdb.Exists(ctx, keys.TenantFlow(tasks.DefaultTenant)).Val() != 0 {
		t.Fatal("the default tenant is counted")
	}
	// another process's count is read once the one seen is flowFresh old
	rdb.Del(ctx, keys.TenantFlow("big"))
	testkit.Eventually(t, 5*time.Second, "the flow read again", func() bool { return !f.flooding(ctx, "big/s1") })
	if off := newTenantFlows(rdb, keys, 0); off.flooding(ctx, "big/s1") {
		t.Fatal("no cap, and flooding")
	}
}
