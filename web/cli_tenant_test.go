package web_test

import (
	"testing"

	"github.com/hooklane/hooklane/web"
)

// Issue 34, requirement 6: the CLI takes --tenant: its commands then go to
// that tenant's routes, by its ids.
func TestCLITenant(t *testing.T) {
	b := setup(t, nil)
	for _, n := range []string{"a", "b"} {
		b.call(t, "PUT", "/v1/tenants/"+n, nil)
	}
	var sub web.Subscriber
	if err := b.cli(t, &sub, "--tenant", "a", "subscribers", "put", "s1", "-url", "http://127.0.0.1:9/a"); err != nil || sub.ID != "s1" {
		t.Fatalf("--tenant a subscribers put s1: %+v, %v", sub, err)
	}
	if r := b.call(t, "GET", "/v1/tenants/a/subscribers/s1", nil); r.status != 200 {
		t.Fatalf("a's s1: %d %s", r.status, r.body)
	}
	for _, args := range [][]string{{"--tenant=b", "subscribers", "get", "s1"}, {"subscribers", "get", "s1"}} {
		if err := b.cliRaw(t, map[string]string{"HOOKLANE_URL": b.srv.URL, "HOOKLANE_API_TOKEN": token}, args...); err == nil {
			t.Errorf("%v found a's s1", args)
		}
	}
	var list []web.Subscriber
	if err := b.cli(t, &list, "-tenant", "a", "subscribers", "list"); err != nil || len(list) != 1 || list[0].ID != "s1" {
		t.Fatalf("-tenant a subscribers list: %+v, %v", list, err)
	}
}
