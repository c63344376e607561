package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// Issue 34, requirement 1: two tenants' subscriber "s1" and event "evt_1"
// are each their own. Each endpoint is sent its own tenant's data under
// webhook-id evt_1, once; a delivery that dies is a dead letter of its
// tenant alone ("s1:evt_2" to it, unseen and undeletable by the other and
// by the default tenant), replayed by its tenant.
func TestTenantsDeliverTheirOwnEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, worker.Config{})
	fail := true
	sinks := map[string]*testkit.Sink{}
	ps := map[string]*producer.Producer{}
	for _, n := range []string{"a", "b"} {
		sinks[n] = testkit.NewSink(t, func(w http.ResponseWriter, i int) {
			if n == "a" && i == 1 && fail { // a's second request: evt_2, which dies
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
		if _, _, err := b.p.PutTenant(ctx, n, producer.TenantSettings{}); err != nil {
			t.Fatal(err)
		}
		p, err := b.p.Tenant(n)
		if err != nil {
			t.Fatal(err)
		}
		ps[n] = p
		if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s1", URL: sinks[n].URL, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b"} {
		ev := tasks.Event{ID: "evt_1", Type: "t", Data: json.RawMessage(`{"tenant":"` + n + `"}`)}
		if _, err := ps[n].Publish(ctx, ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b"} {
		testkit.Eventually(t, 20*time.Second, n+"'s evt_1 delivered", func() bool {
			d, err := ps[n].GetDelivery(ctx, "s1", "evt_1")
			return err == nil && d.State == tasks.StateDelivered
		})
		got := sinks[n].Got()
		if len(got) != 1 || got[0].ID != "evt_1" {
			t.Fatalf("%s's endpoint got %d requests (%+v); want evt_1 once", n, len(got), got)
		}
		var body struct{ Data map[string]string }
		if err := json.Unmarshal(got[0].Body, &body); err != nil || body.Data["tenant"] != n {
			t.Fatalf("%s's endpoint was sent %s; want its own tenant's data", n, got[0].Body)
		}
	}
	if _, err := ps["a"].Publish(ctx, tasks.Event{ID: "evt_2", Type: "t", Data: json.RawMessage(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	var dead []tasks.DeadLetter
	testkit.Eventually(t, 20*time.Second, "a's evt_2 dead", func() bool {
		var err error
		dead, _, err = ps["a"].DeadLetters(ctx, producer.DeadLetterQuery{})
		return err == nil && len(dead) == 1
	})
	if dead[0].TaskID != "s1:evt_2" || dead[0].SubscriberID != "s1" {
		t.Fatalf("a's dead letter: %+v; want task s1:evt_2 of s1", dead[0])
	}
	def, err := b.p.Tenant(tasks.DefaultTenant)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*producer.Producer{"b": ps["b"], "default": def} {
		if dl, _, err := p.DeadLetters(ctx, producer.DeadLetterQuery{}); err != nil || len(dl) != 0 {
			t.Errorf("%s sees %d dead letters (%v); want none of a's", name, len(dl), err)
		}
		if dl, _, err := p.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{"s1:evt_2", "a/s1:evt_2"}}); err != nil || len(dl) != 0 {
			t.Errorf("%s reads a's dead letter by id: %+v, %v", name, dl, err)
		}
		for _, id := range []string{"s1:evt_2", "a/s1:evt_2"} {
			if err := p.DeleteDeadLetter(ctx, id); !errors.Is(err, producer.ErrUnknownDeadLetter) {
				t.Errorf("%s's DeleteDeadLetter(%s) = %v; want ErrUnknownDeadLetter", name, id, err)
			}
		}
		if out, _, err := p.Replay(ctx, producer.DeadLetterQuery{}); err != nil || len(out) != 0 {
			t.Errorf("%s's Replay = %+v, %v; want nothing", name, out, err)
		}
	}
	fail = false
	out, _, err := ps["a"].Replay(ctx, producer.DeadLetterQuery{})
	if err != nil || len(out) != 1 || out[0].TaskID != "s1:evt_2" {
		t.Fatalf("a's Replay = %+v, %v", out, err)
	}
	testkit.Eventually(t, 20*time.Second, "a's evt_2 delivered once replayed", func() bool {
		d, err := ps["a"].GetDelivery(ctx, "s1", "evt_2")
		return err == nil && d.State == tasks.StateDelivered
	})
	if n := sinks["b"].Count(); n != 1 {
		t.Fatalf("b's endpoint got %d requests; want its evt_1 only", n)
	}
	// Deleting a deletes its dead letters too (the replayed one's entry)
	if dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{"a/s1:evt_2"}, IncludeReplayed: true}); err != nil || len(dl) != 1 {
		t.Fatalf("the operator's read of a's replayed dead letter: %+v, %v", dl, err)
	}
	if err := b.p.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if dl, _, err := b.p.DeadLetters(ctx, producer.DeadLetterQuery{IDs: []string{"a/s1:evt_2"}, IncludeReplayed: true}); err != nil || len(dl) != 0 {
		t.Fatalf("a's dead letter after a's delete: %+v, %v", dl, err)
	}
	if d, err := ps["b"].GetDelivery(ctx, "s1", "evt_1"); err != nil || d.State != tasks.StateDelivered {
		t.Fatalf("b's delivery after a's delete: %+v, %v", d, err)
	}
}
