package producer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Publishing reads the subscribers an event matches, never the others: with
// 300 subscribers of other types, no command of the publish (those run
// inside Lua included, as Redis' MONITOR shows them) names any of them, so
// its cost does not grow with the total.
func TestPublishReadsOnlyTheMatchingSubscribers(t *testing.T) {
	ctx := context.Background()
	srv, err := deploy.StartRedis(ctx, deploy.RedisOpts{}) // MONITOR sees every client: a server of its own
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ns := testkit.Namespace("cost")
	keys := tasks.Keys(ns)
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: srv.URL}, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "match", URL: "https://a.test/h", EventTypes: []string{"video.trending"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: fmt.Sprintf("other-%03d", i), URL: "https://b.test/h", EventTypes: []string{"billing.*"}}); err != nil {
			t.Fatal(err)
		}
	}

	lines := testkit.Monitor(t, srv.Addr, func() {
		res, err := p.Publish(ctx, event("e1", "video.trending"), nil)
		if err != nil || len(res.Targets) != 1 || res.Targets[0].SubscriberID != "match" {
			t.Fatalf("publish: %+v, %v; want the one matching subscriber", res, err)
		}
	})
	var hmget bool
	for _, l := range lines {
		if strings.Contains(l, "other-") {
			t.Errorf("the publish touched a subscriber it does not match: %s", l)
		}
		// MONITOR shows a command as its sender spelled it: go-redis in
		// lower case, a script as written.
		low := strings.ToLower(l)
		for _, all := range []string{`"hgetall"`, `"hvals"`, `"hkeys"`, `"hscan"`, `"scan"`, `"keys"`, `"smembers"`, `"sscan"`, `"zscan"`} {
			if strings.Contains(low, all) {
				t.Errorf("the publish read a whole collection: %s", l)
			}
		}
		// The directory of subscriber ids is not read (a ZRANGE of it is a
		// read of every subscriber).
		if strings.Contains(l, keys.SubscriberIDs()) {
			t.Errorf("the publish read the directory of every subscriber: %s", l)
		}
		hmget = hmget || strings.Contains(low, `"hmget"`) && strings.Contains(l, `"match"`)
	}
	if !hmget {
		t.Errorf("no HMGET of the matching subscriber's configuration among the %d commands seen: %q", len(lines), lines)
	}
}
