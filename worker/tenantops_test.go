package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Issue 34, requirement 5: a tenant's endpoint that fails is reported to
// that tenant's own operational webhook (a subscriber of its own to
// hooklane.subscriber.failing, signed with its own secret), naming the
// endpoint by the tenant's id; the operator's webhook gets the report too,
// naming it by its stored id; another tenant's gets nothing.
func TestTenantsGetTheirOwnOperatorEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{Breaker: limits.BreakerPolicy{Failures: 3, ProbeGap: time.Second, MaxProbeGap: 2 * time.Second}})
	type op struct {
		sink   *testkit.Sink
		secret string
	}
	ops := map[string]op{}
	ps := map[string]*producer.Producer{}
	for _, n := range []string{"a", "b", tasks.DefaultTenant} {
		p, err := b.p.Tenant(n)
		if err != nil {
			t.Fatal(err)
		}
		ps[n] = p
		sink := testkit.NewSink(t, nil)
		s, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "ops", URL: sink.URL, EventTypes: []string{tasks.OperatorFailing}})
		if err != nil {
			t.Fatal(err)
		}
		ops[n] = op{sink, s.Secrets[0]}
	}
	f := newFlaky(t)
	f.down.Store(true)
	if _, err := ps["a"].PutSubscriber(ctx, tasks.Subscriber{ID: "crm", URL: f.URL, EventTypes: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := ps["a"].Publish(ctx, tasks.Event{ID: fmt.Sprintf("e%d", i), Type: "t", Data: json.RawMessage(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	failing := func(n string) []worker.FailingEvent {
		var out []worker.FailingEvent
		for _, e := range operatorEvents(t, ops[n].sink, ops[n].secret) {
			var d worker.FailingEvent
			if e.Type == tasks.OperatorFailing && json.Unmarshal(e.Data, &d) == nil {
				out = append(out, d)
			}
		}
		return out
	}
	for n, want := range map[string]string{"a": "crm", tasks.DefaultTenant: "a/crm"} {
		testkit.Eventually(t, 30*time.Second, n+"'s hooklane.subscriber.failing", func() bool { return len(failing(n)) > 0 })
		if got := failing(n); len(got) != 1 || got[0].SubscriberID != want {
			t.Errorf("%s's failing events: %+v; want one naming %s", n, got, want)
		}
	}
	if n := ops["b"].sink.Count(); n != 0 {
		t.Errorf("tenant b's operational webhook got %d requests about a's endpoint", n)
	}
}
