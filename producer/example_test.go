package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// An app registers a subscriber once and publishes events; publishing the
// same event again is reported as a duplicate and delivered only once.
func Example() {
	ctx := context.Background()
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: testkit.Namespace("example")})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	_, err = p.PutSubscriber(ctx, tasks.Subscriber{
		ID: "acme-crm", URL: "https://crm.acme.example/hooks",
		EventTypes: []string{"video.*"},
		Limit:      limits.Limit{Rate: 10, Burst: 20, Period: time.Second}, MaxInFlight: 4,
	})
	if err != nil {
		panic(err)
	}
	ev := tasks.Event{ID: "evt_01JMZ8K3", Type: "video.trending", Data: json.RawMessage(`{"video_id":"vv_9f31c2"}`)}
	for range 2 {
		res, err := p.Publish(ctx, ev, nil)
		if err != nil {
			panic(err)
		}
		for _, t := range res.Targets {
			fmt.Println(t.SubscriberID, t.Outcome)
		}
	}
	// Output:
	// acme-crm enqueued
	// acme-crm duplicate
}
