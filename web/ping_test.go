package web_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// POST /v1/subscribers/{id}/test sends that subscriber alone a signed
// hooklane.ping, delivered by the worker like any event, which verifies
// with the subscriber's secret; every call is a new event; an unknown
// subscriber is a 404 that sends nothing.
func TestTestEndpointSendsASignedPing(t *testing.T) {
	b := setup(t, fastRetries)
	sink, other := testkit.NewSink(t, nil), testkit.NewSink(t, nil)
	for id, url := range map[string]string{"s": sink.URL, "other": other.URL} {
		if r := b.call(t, "PUT", "/v1/subscribers/"+id, `{"url":"`+url+`"}`); r.status != 201 {
			t.Fatalf("PUT %s: %d %s", id, r.status, r.body)
		}
	}
	var ids []string
	for range 2 {
		r := b.call(t, "POST", "/v1/subscribers/s/test", nil)
		var res struct {
			EventID string `json:"event_id"`
			Targets []struct {
				SubscriberID, Outcome string
			} `json:"targets"`
		}
		if err := json.Unmarshal(r.body, &res); err != nil || r.status != 202 || !strings.HasPrefix(res.EventID, "ping_") ||
			len(res.Targets) != 1 || res.Targets[0].Outcome != "enqueued" {
			t.Fatalf("test: %d %s (%v); want 202, a ping_ event enqueued for s", r.status, r.body, err)
		}
		ids = append(ids, res.EventID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two calls made one event %s", ids[0])
	}
	if r := b.call(t, "POST", "/v1/subscribers/nobody/test", nil); r.status != 404 {
		t.Errorf("unknown subscriber: %d %s; want 404", r.status, r.body)
	}

	testkit.Eventually(t, 10*time.Second, "both pings delivered", func() bool { return sink.Count() == 2 })
	sub, err := b.p.GetSubscriber(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wh, err := standardwebhooks.NewWebhook(sub.Secrets[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range sink.Got() {
		var body struct {
			ID, Type string
			Data     map[string]string
		}
		if err := json.Unmarshal(a.Body, &body); err != nil || body.Type != web.PingType || body.Data["subscriber_id"] != "s" ||
			a.ID != body.ID || (body.ID != ids[0] && body.ID != ids[1]) {
			t.Errorf("ping %d: webhook-id %s, body %s (%v); want a hooklane.ping naming s, one of %v", i, a.ID, a.Body, err, ids)
		}
		if err := wh.Verify(a.Body, a.Header); err != nil {
			t.Errorf("ping %d does not verify with the subscriber's secret: %v", i, err)
		}
	}
	if n := other.Count(); n != 0 {
		t.Errorf("another subscriber received %d pings", n)
	}
}
