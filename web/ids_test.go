package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/redis/go-redis/v9"
)

// A subscriber or event id that URL path cleaning changes ("." or "..")
// cannot be created through the API. The mux cleans /v1/subscribers/.. to
// /v1/ before any handler sees it, so the id can only come in
// percent-encoded in the path, or in a body: both are refused (422 naming
// the field) and write nothing. A subscriber stored under one before
// (here, carried over from the release before) can still be deleted.
func TestDotSegmentIDsCannotBeCreated(t *testing.T) {
	b := setup(t, nil)
	for _, id := range []string{".", ".."} {
		encoded := strings.ReplaceAll(id, ".", "%2E")
		for _, c := range []struct {
			method, path string
			body         map[string]any
			field        string
		}{
			{"PUT", "/v1/subscribers/" + encoded, map[string]any{"url": "https://a.test/h"}, "id"},
			{"POST", "/v1/events", map[string]any{"id": id, "type": "t", "data": nil}, "id"},
			{"POST", "/v1/events", map[string]any{"id": "e1", "type": "t", "data": nil, "subscriber_id": id}, "subscriber_id"},
		} {
			r := b.callRaw(t, c.method, c.path, c.body, bearer)
			if code, field := r.errorOf(t); r.status != 422 || code != "invalid" || field != c.field {
				t.Errorf("%s %s %v: %d %s; want 422 invalid on %s", c.method, c.path, c.body, r.status, r.body, c.field)
			}
		}
	}
	if page := b.call(t, "GET", "/v1/subscribers", nil).json(t); len(page["subscribers"].([]any)) != 0 {
		t.Fatalf("a refused PUT wrote a subscriber: %v", page)
	}
	if n, err := b.rdb.Exists(context.Background(), tasks.Keys(b.ns).Event("e1")).Result(); err != nil || n != 0 {
		t.Fatalf("a refused publish stored its event: %d, %v", n, err)
	}

	// ".." created by the release before, which did not refuse it: as it
	// wrote it, in the directory and the gate record.
	ctx := context.Background()
	keys := tasks.Keys(b.ns)
	old, _ := json.Marshal(tasks.Subscriber{ID: "..", URL: "https://a.test/h", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Gen: "g0"})
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keys.SubscriberConfigs(), "..", old)
		p.ZAdd(ctx, keys.SubscriberIDs(), redis.Z{Member: ".."})
		p.HSet(ctx, keys.Gate(".."), "gen", "g0")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if r := b.callRaw(t, "DELETE", "/v1/subscribers/%2E%2E", nil, bearer); r.status != 204 {
		t.Fatalf("DELETE /v1/subscribers/%%2E%%2E: %d %s; want the stored subscriber deleted", r.status, r.body)
	}
	if _, err := b.p.GetSubscriber(ctx, ".."); !errors.Is(err, producer.ErrUnknownSubscriber) {
		t.Fatalf("after the delete: %v; want it gone", err)
	}
}
