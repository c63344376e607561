package worker_test

// Sentinel failover: the master killed in the middle of a burst of
// publishes, with a `hooklane worker` process and a web server on
// Sentinel-backed clients, neither told anything.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// lossWindow is how long before the master's death a publish it
// acknowledged may be lost, as deploy/GUARANTEES.md states it: Redis replicates
// asynchronously, so what the replica has not received when the master
// dies is gone. On loopback the replica lags by well under a millisecond.
const lossWindow = time.Second

// burst publishes an event every 1/rate s to p for a while, each publish
// given at most a second, and records each result (a publication).
type burst struct {
	mu   sync.Mutex
	pubs []publication
	done chan struct{}
}

func startBurst(p *producer.Producer, rate int, d time.Duration) *burst {
	b := &burst{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			<-tick.C
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			id := fmt.Sprintf("b%04d", i)
			_, err := p.Publish(ctx, tasks.Event{ID: id, Type: "t", Data: []byte(`1`)}, nil)
			cancel()
			b.mu.Lock()
			b.pubs = append(b.pubs, publication{id: id, at: time.Now(), err: err})
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *burst) acked() (n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pubs {
		if p.err == nil {
			n++
		}
	}
	return n
}

func (b *burst) all() []publication {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.pubs)
}

// sentinelFailover kills the master while a burst of 50 publishes/s
// goes on, with a `hooklane worker` process delivering them and a web
// server on Sentinel: both follow the promoted replica by themselves
// (deliveries resume, /readyz is ready again, publishes through the SDK
// and the API succeed again), and every publish that returned success is
// delivered, except ones acknowledged within lossWindow before the kill.
// It logs how many were lost, how long before the kill they were
// acknowledged, and how long publishing and delivering stopped.
func sentinelFailover(t *testing.T) {
	ctx := context.Background()
	sn, err := testkit.StartSentinel(ctx, testkit.SentinelOpts{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sn.Stop)
	cfg := deploy.RedisConfig{SentinelAddrs: sn.SentinelAddrs, SentinelMaster: sn.MasterName}
	// As producer.New tunes its own client: a publish fails fast while the
	// master is away.
	rdb, err := cfg.NewClient(deploy.ClientTuning{DialerRetries: 1, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	ns := testkit.Namespace("sentinel")
	p, err := producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: rdb, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	rc := testkit.NewSink(t, nil)
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "s", URL: rc.URL, Limit: fast, MaxInFlight: 20}); err != nil {
		t.Fatal(err)
	}
	w := startProc(t, "", ns, cfg.Env()...)
	api := startWeb(t, web.Config{RedisConfig: cfg, Namespace: ns})
	if code, body := api.call("GET", "/readyz", nil); code != http.StatusOK {
		t.Fatalf("/readyz before the failover: %d %s", code, body)
	}

	const rate, length = 50, 8 * time.Second
	b := startBurst(p, rate, length)
	t.Cleanup(func() { <-b.done })
	testkit.Eventually(t, 10*time.Second, "100 publishes acknowledged", func() bool { return b.acked() >= 100 })
	testkit.Eventually(t, 5*time.Second, "deliveries under way", func() bool { return rc.Count() >= 50 })
	old, err := sn.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// /readyz, from the kill on: the first ready answer after an unready one.
	var readyAgain time.Time
	unready := 0
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		testkit.PollEvery(20*time.Second, 50*time.Millisecond, func() bool {
			if code, _ := api.call("GET", "/readyz", nil); code != http.StatusOK {
				unready++
				return false
			}
			if unready > 0 {
				readyAgain = time.Now()
			}
			return unready > 0
		})
	}()
	t.Cleanup(func() { <-readyDone })
	promoted, err := sn.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	failedOver := time.Since(killed)
	<-b.done
	<-readyDone

	// After the burst, through the API: published and delivered.
	if code, body := api.call("POST", "/v1/events", `{"id":"api-after","type":"t","data":1}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/events after the failover: %d %s", code, body)
	}

	pubs := b.all()
	want := map[string]time.Time{"api-after": time.Now()} // acknowledged events → when
	var firstOK time.Time                                 // the first publish acknowledged after the kill
	failed := 0
	for _, x := range pubs {
		if x.err != nil {
			failed++
			continue
		}
		want[x.id] = x.at
		if x.at.After(killed) && firstOK.IsZero() {
			firstOK = x.at
		}
	}
	// Wait until each acknowledged event arrived, or nothing holds it any
	// more (lost: waiting longer will not bring it): neither its task nor
	// its delivery record on its way (parked in the subscriber's lot while
	// the worker was away and its in-flight slots were handed out, a turn
	// hands it out).
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var missing []string
	testkit.PollEvery(20*time.Second, 200*time.Millisecond, func() bool {
		got := map[string]bool{}
		for _, a := range rc.Got() {
			got[a.ID] = true
		}
		missing = missing[:0]
		settled := true
		for id := range want {
			if got[id] {
				continue
			}
			missing = append(missing, id)
			if _, err := testkit.Task(insp, ns, tasks.TaskID("s", id)); !errors.Is(err, asynq.ErrTaskNotFound) {
				settled = false // still queued somewhere (or unreadable): wait
			} else if d, err := p.GetDelivery(ctx, "s", id); err == nil && d.State != tasks.StateDelivered && d.State != tasks.StateDead {
				settled = false // parked: wait
			}
		}
		return settled
	})
	slices.Sort(missing)
	for _, id := range missing { // where each missing one is, for the failure's reader
		k := tasks.Keys(ns)
		g := k.Gates("s")
		d, derr := p.GetDelivery(ctx, "s", id)
		rec := rdb.HGetAll(ctx, g.Deliveries+id).Val()
		t.Logf("missing %s: delivery %+v %v; record %v; lot %v; out %v; runs %v; gate %v; ready %v; claimed %v; in flight %v", id, d, derr, rec,
			rdb.ZScore(ctx, g.Lot, id).Val(), rdb.ZScore(ctx, g.Out, id).Val(), rdb.ZScore(ctx, g.Runs, id).Val(), rdb.HGetAll(ctx, g.Record).Val(),
			rdb.ZRangeWithScores(ctx, k.Ready(""), 0, -1).Val(), rdb.ZRangeWithScores(ctx, k.Claimed(""), 0, -1).Val(), rdb.ZRangeWithScores(ctx, g.InFlight, 0, -1).Val())
	}

	arrivals := rc.Got()
	var firstDelivery time.Time // the first arrival of an event acknowledged after the kill
	seen := map[string]int{}
	for _, a := range arrivals {
		seen[a.ID]++
		if at, ok := want[a.ID]; ok && at.After(killed) && firstDelivery.IsZero() {
			firstDelivery = a.At
		}
	}
	dups := 0
	for _, n := range seen {
		dups += max(n-1, 0)
	}
	if !w.alive() {
		t.Errorf("the worker process exited: %v", w.err)
	}
	if firstOK.IsZero() {
		t.Fatalf("no publish succeeded after the kill (%d failed)", failed)
	}
	if firstDelivery.IsZero() {
		t.Fatal("no event published after the kill was delivered: the worker did not reconnect")
	}
	if readyAgain.IsZero() {
		t.Errorf("/readyz never answered ready again after the kill (%d unready answers)", unready)
	}
	if seen["api-after"] == 0 {
		t.Errorf("the event published through the API after the failover was not delivered")
	}
	var lostAge []time.Duration
	for _, id := range missing {
		age := killed.Sub(want[id])
		lostAge = append(lostAge, age)
		if age < 0 || age > lossWindow {
			t.Errorf("%s, acknowledged %v before the kill, was lost; deploy/GUARANTEES.md allows %v", id, age, lossWindow)
		}
	}
	t.Logf("failover to %s: sentinels agreed after %v; %d publishes, %d acknowledged, %d failed; "+
		"first acknowledged publish %v after the kill, first delivery of one %v after; /readyz ready again after %v (%d unready answers)",
		promoted, failedOver.Round(time.Millisecond), len(pubs), len(want)-1, failed,
		firstOK.Sub(killed).Round(time.Millisecond), firstDelivery.Sub(killed).Round(time.Millisecond),
		readyAgain.Sub(killed).Round(time.Millisecond), unready)
	t.Logf("lost acknowledged publishes: %d %v, acknowledged %v before the kill; %d requests, %d duplicates (at-least-once)",
		len(missing), missing, lostAge, len(arrivals), dups)
}
