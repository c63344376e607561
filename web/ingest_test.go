package web_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/web"
)

// Publishing past the token's rate is answered 429 with a Retry-After after
// which it succeeds; the refused publish wrote nothing (published again, it
// is enqueued, not a duplicate); the limit holds across web processes and
// however the token is presented.
func TestPublishIsRateLimitedPerToken(t *testing.T) {
	t.Parallel()
	ns := testkit.Namespace("ingest")
	var servers []*bundle
	for range 2 {
		s, err := web.New(web.Config{Token: token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: ns, Logger: quiet,
			IngestRate: 1, IngestBurst: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, &bundle{srv: newServer(t, s.Handler())})
	}
	one, other := servers[0], servers[1]
	if r := one.call(t, "PUT", "/v1/subscribers/s", `{"url":"https://a.test/h"}`); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	publish := func(b *bundle, id string, basic bool) response {
		return b.callAuth(t, "POST", "/v1/events", `{"id":"`+id+`","type":"t","data":1}`, func(r *http.Request) {
			if basic {
				r.SetBasicAuth("anyone", token)
			} else {
				r.Header.Set("Authorization", "Bearer "+token)
			}
		})
	}
	if r := publish(one, "e1", false); r.status != 202 {
		t.Fatalf("e1: %d %s", r.status, r.body)
	}
	if r := publish(other, "e2", true); r.status != 202 {
		t.Fatalf("e2 through the other web process, basic auth: %d %s", r.status, r.body)
	}
	r := publish(one, "e3", false)
	if code, _ := r.errorOf(t); r.status != 429 || code != "rate_limited" {
		t.Fatalf("e3 past the burst of 2: %d %s; want 429 rate_limited", r.status, r.body)
	}
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 1 {
		t.Fatalf("Retry-After %q; want 1 (whole seconds, rounded up, at 1/s)", r.header.Get("Retry-After"))
	}
	var again response
	testkit.Eventually(t, time.Duration(ra+5)*time.Second, "e3 accepted after its Retry-After", func() bool {
		again = publish(one, "e3", false)
		return again.status != 429
	})
	if again.status != 202 || strings.Contains(string(again.body), `"`+string(producer.Duplicate)+`"`) {
		t.Fatalf("e3 again: %d %s; want 202, booked (not a duplicate: the refused call wrote nothing)", again.status, again.body)
	}
	if n := len(again.json(t)["targets"].([]any)); n != 1 {
		t.Fatalf("e3 again: %d targets", n)
	}
}

func TestFromEnvReadsTheIngestLimit(t *testing.T) {
	t.Setenv("HOOKLANE_INGEST_RATE", "50")
	c, err := web.FromEnv()
	if c = c.WithDefaults(); err != nil || c.IngestRate != 50 || c.IngestBurst != 100 {
		t.Fatalf("FromEnv: rate %d burst %d, %v; want 50 and 100", c.IngestRate, c.IngestBurst, err)
	}
	for _, bad := range []string{"0", "-1", "lots", "1.5"} {
		t.Setenv("HOOKLANE_INGEST_BURST", bad)
		if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_INGEST_BURST") {
			t.Errorf("HOOKLANE_INGEST_BURST=%s: %v; want an error naming it", bad, err)
		}
	}
	if _, err := web.New(web.Config{Addr: "127.0.0.1:0", IngestRate: -1, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "IngestRate") {
		t.Errorf("New with IngestRate -1: %v", err)
	}
}
