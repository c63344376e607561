package web_test

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// Issue 34, requirement 2: tenant b's token, on every operation of the
// API document, with tenant a's name in the path and a's ids (the
// document's examples: subscriber acme, event evt_1), reads and writes
// nothing of a's: a tenant route answers 404 unknown_tenant, exactly as an
// unknown tenant's, whatever the method and scope; a route without a
// tenant is b's own, and shows nothing of a's. a's keys (its subscriber's
// slot, its event, its directory entries, its registry entry and tokens)
// are byte for byte what they were.
func TestForeignTenantTokenReadsAndWritesNothing(t *testing.T) {
	b := setup(t, nil)
	for _, n := range []string{"a", "b"} {
		if r := b.call(t, "PUT", "/v1/tenants/"+n, nil); r.status != 201 {
			t.Fatal(r.status)
		}
	}
	const secretURL, secretData = "http://127.0.0.1:9/a-private-url", "a-private-data"
	b.call(t, "PUT", "/v1/tenants/a/subscribers/acme", map[string]any{"url": secretURL})
	b.call(t, "POST", "/v1/tenants/a/events", map[string]any{"id": "evt_1", "type": "video.published", "data": map[string]string{"x": secretData}})
	b.tenantToken(t, "a", time.Time{}, "read")
	foreign := b.tenantToken(t, "b", time.Time{}, "publish", "read", "manage")
	before := b.tenantState(t, "a")
	doc := theContract(t).doc
	walked := 0
	for _, o := range documentedOperations(doc) {
		if !strings.HasPrefix(o.path, "/v1/") || o.path == "/v1/openapi.json" {
			continue
		}
		path := o.path
		for _, p := range append(doc.Paths.Value(o.path).Parameters, o.op.Parameters...) {
			if p.Value.In == "path" {
				ex, _ := p.Value.Example.(string)
				if p.Value.Name == "tenant" {
					ex = "a"
				}
				path = strings.ReplaceAll(path, "{"+p.Value.Name+"}", ex)
			}
		}
		var body any
		if rb := o.op.RequestBody; rb != nil {
			examples := rb.Value.Content.Get("application/json").Examples
			if names := slices.Sorted(maps.Keys(examples)); len(names) > 0 {
				body = examples[names[0]].Value.Value
			}
		}
		r := b.callRaw(t, o.method, path, body, foreign)
		walked++
		if strings.HasPrefix(o.path, "/v1/tenants") {
			if code, _ := r.errorOf(t); r.status != 404 || code != "unknown_tenant" ||
				!strings.Contains(string(r.body), `no tenant \"a\"`) && !strings.Contains(string(r.body), `no tenant \"\"`) {
				t.Errorf("b's token on %s %s: %d %s; want 404 unknown_tenant, as an unknown tenant's", o.method, path, r.status, r.body)
			}
		} else if r.status >= 500 {
			t.Errorf("b's token on %s %s: %d %s", o.method, path, r.status, r.body)
		}
		if bytes.Contains(r.body, []byte(secretURL)) || bytes.Contains(r.body, []byte(secretData)) {
			t.Errorf("b's token on %s %s read a's data: %s", o.method, path, r.body)
		}
	}
	if walked < 40 {
		t.Fatalf("walked %d operations; want every one of the document's (its tenants' too)", walked)
	}
	after := b.tenantState(t, "a")
	for k, v := range before {
		if after[k] != v {
			t.Errorf("a's %s changed", k)
		}
	}
	if len(after) != len(before) {
		t.Errorf("a's keys: %d before, %d after", len(before), len(after))
	}
}

// tenantState is every key of tenant's, dumped: its subscribers' slots,
// its events, its directory and registry entries, its tokens.
func (b *bundle) tenantState(t *testing.T, tenant string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys := tasks.Keys(b.ns)
	out := map[string]string{}
	var names []string
	for _, pattern := range []string{b.ns + ":s:{" + tenant + "/*", b.ns + ":{" + b.ns + ":ev:" + tenant + "/*"} {
		found, err := b.rdb.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, found...)
	}
	if len(names) == 0 {
		t.Fatalf("tenant %s has no keys", tenant)
	}
	for _, k := range names {
		out[k] = b.rdb.Dump(ctx, k).Val()
	}
	ids, _ := b.rdb.ZRange(ctx, keys.SubscriberIDs(), 0, -1).Result()
	for _, id := range ids {
		if strings.HasPrefix(id, tenant+"/") {
			out["config "+id] = b.rdb.HGet(ctx, keys.SubscriberConfigs(), id).Val()
		}
	}
	out["registry"] = b.rdb.HGet(ctx, keys.Tenants(), tenant).Val()
	toks, _ := b.rdb.SMembers(ctx, keys.TenantTokens(tenant)).Result()
	slices.Sort(toks)
	out["tokens"] = strings.Join(toks, ",")
	for _, id := range toks {
		out["token "+id] = b.rdb.HGet(ctx, keys.Tokens(), id).Val()
	}
	return out
}
