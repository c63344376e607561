package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// A web process serves at most MaxPublishes publishes at once: one more,
// single or batch, is answered 503 overloaded at once, with a Retry-After,
// and writes nothing; the ones holding the places are answered as usual,
// and once a place is free a publish is accepted again. The places are
// held by publishes that Redis holds (CLIENT PAUSE WRITE, on a server of
// the test's own: the package's is shared).
func TestPublishesPastThePlacesAreRefusedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	// (a read timeout past the test's pause: the held publishes wait
	// rather than fail)
	s, err := web.New(web.Config{Token: token, RedisConfig: deploy.RedisConfig{URL: r.URL + "?read_timeout=60s"}, Namespace: testkit.Namespace("places"),
		Logger: quiet, MaxPublishes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := &bundle{srv: newServer(t, s.Handler())}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { rdb.Close() })
	if r := b.call(t, "PUT", "/v1/subscribers/s", `{"url":"https://a.test/h"}`); r.status != 201 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	publish := func(id string) response {
		return b.call(t, "POST", "/v1/events", `{"id":"`+id+`","type":"t","data":1}`)
	}
	metric := func(name string) string {
		for _, l := range strings.Split(string(b.call(t, "GET", "/metrics", nil).body), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		return ""
	}

	// Two publishes take the two places and wait in Redis.
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			if err := rdb.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(unpause)
	held := make(chan response, 2)
	for i := range 2 {
		go func() { held <- publish(fmt.Sprint("held-", i)) }()
	}
	testkit.Eventually(t, 10*time.Second, "two publishes in progress", func() bool { return s.PublishesInProgress() == 2 })

	// A third, and a batch, are refused at once: Redis still holds the two.
	over := publish("over")
	if code, _ := over.errorOf(t); over.status != 503 || code != "overloaded" || over.header.Get("Retry-After") != "1" {
		t.Fatalf("a third publish: %d %q %s; want 503 overloaded, Retry-After 1", over.status, over.header.Get("Retry-After"), over.body)
	}
	batch := b.call(t, "POST", "/v1/events/batch", `{"events":[{"id":"over-b","type":"t","data":1}]}`)
	if code, _ := batch.errorOf(t); batch.status != 503 || code != "overloaded" || batch.header.Get("Retry-After") != "1" {
		t.Fatalf("a batch: %d %q %s; want 503 overloaded, Retry-After 1", batch.status, batch.header.Get("Retry-After"), batch.body)
	}
	if n := s.PublishesInProgress(); n != 2 {
		t.Fatalf("%d publishes in progress after the refusals; want the 2 Redis holds", n)
	}

	// Redis lets go: the two are accepted, and the refused ones wrote
	// nothing: published again they are new, not duplicates.
	unpause()
	for range 2 {
		select {
		case r := <-held:
			if r.status != 202 {
				t.Errorf("a publish that held a place: %d %s; want 202", r.status, r.body)
			}
		case <-time.After(30 * time.Second): // (its call failed the test)
			t.Fatal("a publish that held a place got no answer 30 s after Redis let go")
		}
	}
	for _, id := range []string{"over", "over-b"} {
		if r := b.call(t, "GET", "/v1/events/"+id, nil); r.status != 404 {
			t.Errorf("GET refused event %s: %d %s; want 404", id, r.status, r.body)
		}
		if r := publish(id); r.status != 202 || strings.Contains(string(r.body), `"duplicate"`) {
			t.Errorf("%s published again: %d %s; want 202, booked (not a duplicate)", id, r.status, r.body)
		}
	}
	if v := metric("hooklane_web_publishes_shed_total"); v != "2" {
		t.Errorf("hooklane_web_publishes_shed_total %q; want 2", v)
	}
	if v := metric("hooklane_web_publishes_in_progress"); v != "0" {
		t.Errorf("hooklane_web_publishes_in_progress %q after every answer; want 0", v)
	}
}

func TestFromEnvReadsTheMostPublishes(t *testing.T) {
	t.Setenv("HOOKLANE_WEB_MAX_PUBLISHES", "8")
	c, err := web.FromEnv()
	if err != nil || c.MaxPublishes != 8 {
		t.Fatalf("MaxPublishes %d, %v; want 8", c.MaxPublishes, err)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		t.Setenv("HOOKLANE_WEB_MAX_PUBLISHES", bad)
		if _, err := web.FromEnv(); err == nil || !strings.Contains(err.Error(), "HOOKLANE_WEB_MAX_PUBLISHES") {
			t.Errorf("HOOKLANE_WEB_MAX_PUBLISHES=%s: %v; want an error naming it", bad, err)
		}
	}
}
