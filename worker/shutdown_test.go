package worker_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

func TestShutdownFinishesInFlightDelivery(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	ns := testkit.Namespace("shutdown-finish-")
	p, _ := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	entered := make(chan struct{}, 1)
	s := testkit.NewSink(t, func(http.ResponseWriter, int) { entered <- struct{}{}; time.Sleep(time.Second) })
	if _, err := p.PutSubscriber(context.Background(), tasks.Subscriber{ID: "s", URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	_, stop := startWorker(t, rdb, ns, worker.Config{ShutdownTimeout: 10 * time.Second})
	publishOne(t, p, "e")
	<-entered
	stop() // as on SIGTERM, while the request is held open
	st, last, err := testkit.Ended(asynq.NewInspectorFromRedisClient(rdb), rdb, ns, "s", "e")
	if err != nil || st != asynq.TaskStateCompleted {
		t.Fatalf("after shutdown the task is %v (%s, %v), want delivered", st, last, err)
	}
}

func TestShutdownRequeuesWhatCannotFinish(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	ns := testkit.Namespace("shutdown-requeue-")
	p, _ := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	entered := make(chan struct{}, 2)
	s := testkit.NewSink(t, func(_ http.ResponseWriter, n int) {
		entered <- struct{}{}
		if n == 0 {
			time.Sleep(5 * time.Second)
		}
	})
	if _, err := p.PutSubscriber(context.Background(), tasks.Subscriber{ID: "s", URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	_, stop := startWorker(t, rdb, ns, worker.Config{ShutdownTimeout: time.Second})
	publishOne(t, p, "e")
	<-entered
	start := time.Now()
	stop()
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("shutdown took %v with a 1s ShutdownTimeout", took)
	}
	info, err := testkit.Task(asynq.NewInspectorFromRedisClient(rdb), ns, tasks.TaskID("s", "e"))
	if err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("after shutdown the task is %s, want pending (requeued)", testkit.State(info, err))
	}
	// A new worker picks it up: nothing was lost.
	_, stop = startWorker(t, rdb, ns, worker.Config{})
	defer stop()
	testkit.Eventually(t, 10*time.Second, "redelivery", func() bool { return s.Count() == 2 })
}

func publishOne(t *testing.T, p *producer.Producer, id string) {
	t.Helper()
	if _, err := p.Publish(context.Background(), tasks.Event{ID: id, Type: "t", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
}
