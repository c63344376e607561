package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/worker"
)

// Issue 34, requirement 5: /metrics has series with a tenant label for
// the tenants the operator lists (HOOKLANE_METRICS_TENANTS) alone: a's,
// counted over its subscribers; b, not listed, has none, though its
// deliveries count in the totals. Deleting a tenant deletes its counters.
func TestMetricsForListedTenants(t *testing.T) {
	b := setupWith(t, &worker.Config{}, func(c *web.Config) { c.MetricsTenants = []string{"a"} })
	sink := testkit.NewSink(t, nil)
	for _, tn := range []string{"a", "b"} {
		b.call(t, "PUT", "/v1/tenants/"+tn, nil)
		for _, id := range []string{"s1", "s2"} {
			b.call(t, "PUT", "/v1/tenants/"+tn+"/subscribers/"+id, map[string]any{"url": sink.URL})
		}
	}
	for i := range 3 {
		b.call(t, "POST", "/v1/tenants/a/events", fmt.Sprintf(`{"id":"e%d","type":"t","data":1}`, i))
	}
	b.call(t, "POST", "/v1/tenants/b/events", `{"id":"e0","type":"t","data":1}`)
	testkit.Eventually(t, 15*time.Second, "a's 6 deliveries in its series", func() bool {
		v, _, ok := value(scrape(t, b), "hooklane_tenant_deliveries_total", map[string]string{"tenant": "a", "outcome": "delivered"})
		return ok && v == 6
	})
	testkit.Eventually(t, 15*time.Second, "all 8 in the totals", func() bool {
		v, _, _ := value(scrape(t, b), "hooklane_deliveries_total", map[string]string{"outcome": "delivered"})
		return v == 8
	})
	fams := scrape(t, b)
	for _, m := range fams["hooklane_tenant_deliveries_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "tenant" && l.GetValue() != "a" {
				t.Errorf("a series for tenant %s, not listed", l.GetValue())
			}
		}
	}
	if _, _, ok := value(fams, "hooklane_tenant_delivery_latency_seconds", map[string]string{"tenant": "a"}); !ok {
		t.Error("no latency histogram for tenant a")
	}
	ctx, keys := context.Background(), tasks.Keys(b.ns)
	if b.rdb.Exists(ctx, keys.TenantTotals("b")).Val() != 1 {
		t.Error("b's counters are not kept (only not shown)")
	}
	b.call(t, "DELETE", "/v1/tenants/b", nil)
	if b.rdb.Exists(ctx, keys.TenantTotals("b")).Val() != 0 {
		t.Error("b's counters outlive it")
	}
	for _, bad := range [][]string{{"default"}, {"Not A Tenant"}, make([]string, 101)} {
		if _, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, MetricsTenants: bad}); err == nil {
			t.Errorf("HOOKLANE_METRICS_TENANTS %v accepted", bad)
		}
	}
}
