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
	p, err := producer.New(&producer.Config{RedisConfig: deploy.RedisConfig{URL: srv.URL}, Namespace: testkit.Namespace("cost")})
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
		for _, all := range []string{`"HGETALL"`, `"HVALS"`, `"HKEYS"`, `"HSCAN"`, `"SCAN"`, `"KEYS"`} {
			if strings.Contains(l, all) {
				t.Errorf("the publish read a whole collection: %s", l)
			}
		}
		hmget = hmget || strings.Contains(l, `"HMGET"`) && strings.Contains(l, `"match"`)
	}
	if !hmget {
		t.Errorf("no HMGET of the matching subscriber's configuration among the %d commands seen: %q", len(lines), lines)
	}
}
