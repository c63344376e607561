package producer_test

import (
	"context"
	"encoding/json"
	"errors"
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

// A batch is answered event by event, in order: the bad event is refused
// on its own, writing nothing, and the others go.
func ExampleProducer_PublishBatch() {
	ctx := context.Background()
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: testkit.Namespace("example")})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "acme-crm", URL: "https://crm.acme.example/hooks", EventTypes: []string{"video.*"}}); err != nil {
		panic(err)
	}
	data := json.RawMessage(`{"video_id":"vv_9f31c2"}`)
	results, err := p.PublishBatch(ctx, []tasks.Event{
		{ID: "evt_1", Type: "video.trending", Data: data},
		{ID: "evt 2", Type: "video.trending", Data: data}, // no spaces in an id
		{ID: "evt_3", Type: "video.removed", Data: data},
	}, nil)
	if err != nil {
		panic(err) // the batch itself refused: more than producer.MaxBatch events
	}
	for _, r := range results {
		if r.Err != nil {
			fmt.Println("refused:", errors.Is(r.Err, producer.ErrInvalid))
			continue
		}
		fmt.Println(r.Result.EventID, r.Result.Targets[0].Outcome)
	}
	// No worker runs here: acme-crm's second event waits in its lot (to
	// go in a batch with what follows), where a worker would take it at
	// once.
	// Output:
	// evt_1 enqueued
	// refused: true
	// evt_3 scheduled
}
