package tasks_test

import (
	"cmp"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/tasks"
)

// A tenant's subscriber is stored as "<tenant>/<id>", the default tenant's
// as its id: no id, type or event id holds a slash, so no tenant's stored
// id, index key or event key is another's.
func TestTenantScopedIDs(t *testing.T) {
	for _, c := range []struct{ tenant, id, stored string }{
		{"acme", "s1", "acme/s1"},
		{tasks.DefaultTenant, "s1", "s1"},
		{"", "s1", "s1"},
	} {
		if got := tasks.ScopedID(c.tenant, c.id); got != c.stored {
			t.Errorf("ScopedID(%q, %q) = %q, want %q", c.tenant, c.id, got, c.stored)
		}
		tenant, id := tasks.SplitScoped(c.stored)
		if want := cmp.Or(c.tenant, tasks.DefaultTenant); tenant != want || id != c.id {
			t.Errorf("SplitScoped(%q) = %q, %q", c.stored, tenant, id)
		}
		if err := tasks.ValidateScopedID(c.stored); err != nil {
			t.Errorf("ValidateScopedID(%q) = %v", c.stored, err)
		}
		if sub, ev, ok := tasks.SplitTaskID(tasks.TaskID(c.stored, "evt:1~x")); !ok || sub != c.stored || ev != "evt:1~x" {
			t.Errorf("SplitTaskID of %q's task = %q, %q, %v", c.stored, sub, ev, ok)
		}
	}
	for _, bad := range []string{"default/s1", "a/b/c", "/s1", "a/", "Acme/s1", "a:b/s1", "acme/s:1"} {
		if err := tasks.ValidateScopedID(bad); err == nil {
			t.Errorf("ValidateScopedID(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "Acme", "a/b", "a.b", "a:b", strings.Repeat("a", 33)} {
		if err := tasks.ValidateTenant(bad); err == nil {
			t.Errorf("ValidateTenant(%q) accepted", bad)
		}
	}
	// New ids stay slash-free: a tenant's id can never be written as another's.
	if err := tasks.ValidateSubscriberID("acme/s1"); err == nil {
		t.Error(`ValidateSubscriberID("acme/s1") accepted`)
	}
	ns := tasks.Keys("n")
	seen := map[string]string{}
	for _, tenant := range []string{tasks.DefaultTenant, "acme", "beta"} {
		keys := append(ns.IndexKeysFor(tenant, "video.x"), ns.AnyIndex(tenant), ns.TenantEvent(tenant, "evt_1"))
		for _, k := range keys {
			if other, ok := seen[k]; ok && other != tenant {
				t.Errorf("key %s is both %s's and %s's", k, other, tenant)
			}
			seen[k] = tenant
		}
	}
	if ns.TenantEvent(tasks.DefaultTenant, "e") != ns.Event("e") || ns.IndexKeyOf(tasks.DefaultTenant, "video.*") != ns.PrefixIndex("", "video.") {
		t.Error("the default tenant's keys moved: existing data would not be found")
	}
}
