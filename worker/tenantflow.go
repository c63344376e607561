package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// tenantFlows keeps, for the dispatchers, each registered tenant's flow:
// its deliveries handed to asynq this second, publishes' and turns' (the
// counter tasks.Keys.TenantFlow). Past Config.TenantFreshRate, a turn of
// one of its subscribers hands out to the backlog lane only, as its
// publishes do (producer.Config.TenantFreshRate): a tenant with many busy
// subscribers leaves the fresh lane to the others. The count is read at
// most every flowFresh per tenant and learnt from each turn's increment;
// it is advisory (it picks a lane, never what is sent), so a lost write
// only lets a second's flow pass a little.
type tenantFlows struct {
	rdb  redis.UniversalClient
	keys tasks.Keys
	rate int // 0: off
	mu   sync.Mutex
	m    map[string]flowSeen
}

type flowSeen struct {
	n  int64
	at time.Time
}

// flowFresh is how long a tenant's count read is used.
const flowFresh = 100 * time.Millisecond

func newTenantFlows(rdb redis.UniversalClient, keys tasks.Keys, rate int) *tenantFlows {
	return &tenantFlows{rdb: rdb, keys: keys, rate: max(rate, 0), m: map[string]flowSeen{}}
}

// flooding reports whether the tenant of stored subscriber id is past its
// fresh rate this second (never the default tenant's).
func (f *tenantFlows) flooding(ctx context.Context, id string) bool {
	tenant := tasks.TenantOf(id)
	if f.rate == 0 || tenant == tasks.DefaultTenant {
		return false
	}
	f.mu.Lock()
	s, ok := f.m[tenant]
	f.mu.Unlock()
	if !ok || time.Since(s.at) > flowFresh {
		n, err := f.rdb.Get(ctx, f.keys.TenantFlow(tenant)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false // a lane, not a guarantee: as if not flooding
		}
		s = f.seen(tenant, n)
	}
	return s.n >= int64(f.rate)
}

// add counts n hand-outs of stored subscriber id's tenant.
func (f *tenantFlows) add(ctx context.Context, id string, n int) {
	tenant := tasks.TenantOf(id)
	if f.rate == 0 || tenant == tasks.DefaultTenant || n == 0 {
		return
	}
	k := f.keys.TenantFlow(tenant)
	after, err := f.rdb.IncrBy(ctx, k, int64(n)).Result()
	if err != nil {
		return
	}
	if after == int64(n) { // the second's first: it ends a second on
		f.rdb.PExpire(ctx, k, time.Second)
	}
	f.seen(tenant, after)
}

func (f *tenantFlows) seen(tenant string, n int64) flowSeen {
	s := flowSeen{n: n, at: time.Now()}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.m) > 10_000 {
		clear(f.m)
	}
	f.m[tenant] = s
	return s
}
