package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// tenant is b's Producer for tenant name.
func (b *bundle) tenant(t *testing.T, name string) *producer.Producer {
	t.Helper()
	p, err := b.p.Tenant(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ids(subs []tasks.Subscriber) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = s.ID
	}
	return out
}

// Issue 34, requirement 1: ids are unique within a tenant. Tenants a and
// b and the default tenant each have subscriber "s1" and publish event
// "evt_1" with data of their own: each stores, books and shows its own,
// by the ids it gave, and lists only its own; a tenant's delete leaves
// the others'. The operator's Producer (no tenant) sees every tenant's,
// the others' by their stored ids.
func TestTenantsOwnTheirIDs(t *testing.T) {
	b, ctx := setup(t), context.Background()
	names := []string{"a", "b", tasks.DefaultTenant}
	ps := map[string]*producer.Producer{}
	for i, n := range names {
		ps[n] = b.tenant(t, n)
		s, err := ps[n].PutSubscriber(ctx, tasks.Subscriber{ID: "s1", URL: "http://127.0.0.1:9/" + n, EventTypes: []string{"order.*"}})
		if err != nil || s.ID != "s1" {
			t.Fatalf("%s: PutSubscriber = %+v, %v", n, s, err)
		}
		if _, err := ps[n].PutSubscriber(ctx, tasks.Subscriber{ID: "only-" + n, URL: "http://127.0.0.1:9/o", Paused: i == 0}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		p := ps[n]
		ev := tasks.Event{ID: "evt_1", Type: "order.paid", Data: json.RawMessage(`{"tenant":"` + n + `"}`)}
		res, err := p.Publish(ctx, ev, nil)
		if err != nil {
			t.Fatalf("%s: Publish = %v", n, err)
		}
		if len(res.Targets) != 2 || res.Targets[0].SubscriberID != "only-"+n && res.Targets[1].SubscriberID != "only-"+n {
			t.Fatalf("%s: published to %+v; want its s1 and only-%s", n, res.Targets, n)
		}
		for _, tg := range res.Targets {
			if tg.TaskID != tasks.TaskID(tg.SubscriberID, "evt_1") {
				t.Fatalf("%s: target %+v: its task id is not its own subscriber's", n, tg)
			}
		}
		// the same id again is a duplicate in its own tenant, not another's conflict
		if res, err := p.Publish(ctx, ev, nil); err != nil || res.Targets[0].Outcome != producer.Duplicate {
			t.Fatalf("%s: publish again = %+v, %v; want a duplicate", n, res, err)
		}
	}
	for _, n := range names {
		p := ps[n]
		s, err := p.GetSubscriber(ctx, "s1")
		if err != nil || s.URL != "http://127.0.0.1:9/"+n || s.ID != "s1" {
			t.Errorf("%s: GetSubscriber(s1) = %+v, %v", n, s, err)
		}
		if _, err := p.GetSubscriber(ctx, "only-"+other(n)); !errors.Is(err, producer.ErrUnknownSubscriber) {
			t.Errorf("%s: another tenant's subscriber: %v; want ErrUnknownSubscriber", n, err)
		}
		er, err := p.GetEvent(ctx, "evt_1")
		if err != nil || string(er.Event.Data) != `{"tenant":"`+n+`"}` {
			t.Fatalf("%s: GetEvent = %+v, %v", n, er, err)
		}
		var subs []string
		for _, d := range er.Deliveries {
			subs = append(subs, d.SubscriberID)
		}
		slices.Sort(subs)
		if !slices.Equal(subs, []string{"only-" + n, "s1"}) {
			t.Errorf("%s: the event's deliveries are to %v", n, subs)
		}
		if se, err := p.StoredEvent(ctx, "evt_1"); err != nil || !slices.Contains(se.Subscribers, "s1") || len(se.Subscribers) != 2 {
			t.Errorf("%s: StoredEvent's subscribers = %v, %v; want its own by its ids", n, se.Subscribers, err)
		}
		if d, err := p.GetDelivery(ctx, "s1", "evt_1"); err != nil || d.SubscriberID != "s1" {
			t.Errorf("%s: GetDelivery = %+v, %v", n, d, err)
		}
		list, err := p.ListSubscribers(ctx)
		if err != nil || !slices.Equal(ids(list), []string{"only-" + n, "s1"}) {
			t.Errorf("%s: ListSubscribers = %v, %v; want its own two", n, ids(list), err)
		}
		page, next, err := p.Subscribers(ctx, "", 1)
		if err != nil || !slices.Equal(ids(page), []string{"only-" + n}) || next != "only-"+n {
			t.Errorf("%s: first page of 1 = %v, next %q, %v", n, ids(page), next, err)
		}
		if page, _, err := p.Subscribers(ctx, next, 5); err != nil || !slices.Equal(ids(page), []string{"s1"}) {
			t.Errorf("%s: page after %q = %v, %v", n, next, ids(page), err)
		}
	}
	all, err := b.p.ListSubscribers(ctx)
	if want := []string{"a/only-a", "a/s1", "b/only-b", "b/s1", "only-default", "s1"}; err != nil || !slices.Equal(ids(all), want) {
		t.Errorf("the operator's ListSubscribers = %v, %v; want %v", ids(all), err, want)
	}
	// a tenant's delete leaves the others' subscriber of the same id
	if err := ps["a"].DeleteSubscriber(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ps["a"].GetSubscriber(ctx, "s1"); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Errorf("a's s1 after its delete: %v", err)
	}
	for _, n := range []string{"b", tasks.DefaultTenant} {
		if s, err := ps[n].GetSubscriber(ctx, "s1"); err != nil || s.URL != "http://127.0.0.1:9/"+n {
			t.Errorf("%s's s1 after a's delete: %+v, %v", n, s, err)
		}
	}
	// a tenant's pause is its own
	if err := ps["b"].SetPaused(ctx, "s1", true); err != nil {
		t.Fatal(err)
	}
	if s, _ := ps[tasks.DefaultTenant].GetSubscriber(ctx, "s1"); s.Paused {
		t.Error("b's pause of its s1 paused the default tenant's")
	}
	if _, err := b.p.Tenant("No/Such"); !errors.Is(err, tasks.ErrInvalid) {
		t.Errorf("Tenant(No/Such) = %v; want ErrInvalid", err)
	}
}

// other is a tenant of TestTenantsOwnTheirIDs that is not n.
func other(n string) string {
	if n == "a" {
		return "b"
	}
	return "a"
}

// The operator registers tenants (PutTenant, Tenants, GetTenant) and
// deletes one with everything it owns: its subscribers, the events they
// were published and their dead letters' keys; another tenant's of the
// same ids stay. The id of a deleted tenant's event is free again: the
// tenant created anew publishes it with other data, no conflict.
func TestDeleteTenantDeletesWhatItOwns(t *testing.T) {
	b, ctx := setup(t), context.Background()
	for _, n := range []string{"b", "a"} {
		if _, created, err := b.p.PutTenant(ctx, n, producer.TenantSettings{}); err != nil || !created {
			t.Fatalf("PutTenant(%s) = %v, %v", n, created, err)
		}
	}
	if _, created, err := b.p.PutTenant(ctx, "a", producer.TenantSettings{}); err != nil || created {
		t.Fatalf("PutTenant(a) again = %v, %v; want it found", created, err)
	}
	list, next, err := b.p.Tenants(ctx, "", 10)
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || next != "" {
		t.Fatalf("Tenants = %+v, %q, %v", list, next, err)
	}
	ps := map[string]*producer.Producer{"a": b.tenant(t, "a"), "b": b.tenant(t, "b")}
	for n, p := range ps {
		for _, id := range []string{"s1", "s2"} {
			if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: id, URL: "http://127.0.0.1:9/" + n}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Publish(ctx, tasks.Event{ID: "evt_1", Type: "t", Data: json.RawMessage(`{"n":"` + n + `"}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.p.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.GetTenant(ctx, "a"); !errors.Is(err, producer.ErrUnknownTenant) {
		t.Errorf("GetTenant(a) after its delete: %v", err)
	}
	if subs, err := ps["a"].ListSubscribers(ctx); err != nil || len(subs) != 0 {
		t.Errorf("a's subscribers after its delete: %v, %v", ids(subs), err)
	}
	if _, err := ps["a"].GetEvent(ctx, "evt_1"); !errors.Is(err, producer.ErrUnknownEvent) {
		t.Errorf("a's evt_1 after its delete: %v; want ErrUnknownEvent", err)
	}
	if subs, err := ps["b"].ListSubscribers(ctx); err != nil || len(subs) != 2 {
		t.Errorf("b's subscribers after a's delete: %v, %v", ids(subs), err)
	}
	if er, err := ps["b"].GetEvent(ctx, "evt_1"); err != nil || string(er.Event.Data) != `{"n":"b"}` {
		t.Errorf("b's evt_1 after a's delete: %+v, %v", er, err)
	}
	if err := b.p.DeleteTenant(ctx, "a"); !errors.Is(err, producer.ErrUnknownTenant) {
		t.Errorf("DeleteTenant(a) again: %v; want ErrUnknownTenant", err)
	}
	if err := b.p.DeleteTenant(ctx, tasks.DefaultTenant); !errors.Is(err, producer.ErrInvalid) {
		t.Errorf("DeleteTenant(default): %v; want it refused", err)
	}
	// a again: its old event id is free
	if _, _, err := b.p.PutTenant(ctx, "a", producer.TenantSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps["a"].PutSubscriber(ctx, tasks.Subscriber{ID: "s1", URL: "http://127.0.0.1:9/a2"}); err != nil {
		t.Fatal(err)
	}
	res, err := ps["a"].Publish(ctx, tasks.Event{ID: "evt_1", Type: "t", Data: json.RawMessage(`{"n":"a2"}`)}, nil)
	if err != nil || len(res.Targets) != 1 || res.Targets[0].Outcome != producer.Enqueued {
		t.Fatalf("a's evt_1 published anew: %+v, %v", res, err)
	}
}

// A revoked token leaves nothing behind: its record, its place in its
// tenant's set and the entry its secret is looked up by all go, and the
// secret is refused; so do a deleted tenant's.
func TestRevokedTokenLeavesNothing(t *testing.T) {
	b, ctx := setup(t), context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	t.Cleanup(func() { rdb.Close() })
	keys := tasks.Keys(b.ns)
	if _, _, err := b.p.PutTenant(ctx, "a", producer.TenantSettings{}); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := b.p.CreateToken(ctx, "a", []string{producer.ScopeRead}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.p.LookupToken(ctx, secret); err != nil || got.ID != tok.ID {
		t.Fatalf("LookupToken = %+v, %v", got, err)
	}
	if err := b.p.RevokeToken(ctx, "a", tok.ID); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, keys.TokenDigests()).Val(); n != 0 { // before any lookup of the secret
		t.Errorf("a revoked token leaves %d digest entries", n)
	}
	if _, err := b.p.LookupToken(ctx, secret); !errors.Is(err, producer.ErrUnknownToken) {
		t.Errorf("a revoked token's secret: %v; want ErrUnknownToken", err)
	}
	_, second, err := b.p.CreateToken(ctx, "a", []string{producer.ScopeRead}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.p.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys.Tokens(), keys.TokenDigests(), keys.TenantTokens("a"), keys.TokensUsed()} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s is left: %v", k, rdb.HGetAll(ctx, k).Val())
		}
	}
	if _, err := b.p.LookupToken(ctx, second); !errors.Is(err, producer.ErrUnknownToken) {
		t.Errorf("a deleted tenant's token: %v; want ErrUnknownToken", err)
	}
}
