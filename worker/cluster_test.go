package worker_test

// The delivery suite's core cases on a 3-master Redis Cluster: the
// producer and an in-process worker on a redis.ClusterClient, each case in
// a namespace of its own, and at the end a look at every master for the
// keys the cases wrote.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/worker"
)

// clusterSuite is one 3-master cluster shared by the cases, and the
// namespaces they used.
type clusterSuite struct {
	c          *deploy.Cluster
	cfg        deploy.RedisConfig
	rdb        redis.UniversalClient
	prefix     string // its namespaces' ("cl-", then "cl2-", ... when run again: -count)
	mu         sync.Mutex
	namespaces []string // every case's, for keys-on-every-master
	dedupNS    string   // the dedup case's, with subscribers on every master
}

// spreadIDs are subscriber ids whose slots ({<id>}) fall on all three
// masters of a cluster made by StartCluster (checked by fanOut, not assumed).
var spreadIDs = []string{"crm", "delta", "acme", "fox", "echo", "hotel"}

// The package's one Cluster, started by the first test that needs it and
// stopped by TestMain; its tests keep to namespaces of their own.
var cluster struct {
	once sync.Once
	c    *deploy.Cluster
	err  error
}

var clusterSuiteRuns atomic.Int64

func sharedCluster(t *testing.T) *deploy.Cluster {
	t.Helper()
	cluster.once.Do(func() { cluster.c, cluster.err = deploy.StartCluster(context.Background(), deploy.ClusterOpts{}) })
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.c
}

func TestClusterDeliverySuite(t *testing.T) {
	testkit.Heavy(t, "a Redis Cluster")
	// Not parallel: the limit case measures arrival times.
	c := sharedCluster(t)
	s := &clusterSuite{c: c, cfg: deploy.RedisConfig{ClusterAddrs: c.Addrs}, prefix: "cl-"}
	// The Cluster outlives a run (-count): a run again keeps to new namespaces.
	if n := clusterSuiteRuns.Add(1); n > 1 {
		s.prefix = fmt.Sprintf("cl%d-", n)
	}
	var err error
	if s.rdb, err = s.cfg.NewClient(deploy.ClientTuning{PoolSize: 64}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.rdb.Close() })
	if _, ok := s.rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient gave a %T for ClusterAddrs, want a *redis.ClusterClient", s.rdb)
	}
	t.Run("dedup", s.dedup)
	t.Run("limit", s.limit) // alone: it measures arrival times
	// These assert no arrival time but "not before a deadline", which
	// load beside them can only make later.
	t.Run("side-by-side", func(t *testing.T) {
		sideBySide(t, []namedTest{{"retry-after", s.retryAfter}, {"dead-letter-replay", s.deadLetterReplay},
			{"ssrf-refusal", s.ssrfRefusal}, {"web-api", s.webAPI}})
	})
	t.Run("keys-on-every-master", s.keysOnEveryMaster) // after the others: it counts their keys
}

// on starts a worker with cfg in a new namespace of the cluster.
func (s *clusterSuite) on(t *testing.T, cfg worker.Config) *bundle {
	t.Helper()
	ns := s.prefix + strings.ReplaceAll(strings.TrimPrefix(t.Name(), "TestClusterDeliverySuite/"), "/", "-")
	s.mu.Lock()
	s.namespaces = append(s.namespaces, ns)
	s.mu.Unlock()
	return setupOn(t, s.rdb, ns, cfg)
}

// master names the master that serves key, as the cluster says.
func (s *clusterSuite) master(t *testing.T, key string) string {
	t.Helper()
	m, err := testkit.MasterForKey(context.Background(), s.c, key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Publishing one event twice to six subscribers on all three masters: the
// first publish enqueues six tasks in several queues, the second reports
// six duplicates, and each endpoint gets the event once.
func (s *clusterSuite) dedup(t *testing.T) {
	b := s.on(t, worker.Config{})
	s.dedupNS = b.ns
	k := tasks.Keys(b.ns)
	subMasters, queueMasters := map[string]bool{}, map[string]bool{}
	sinks := map[string]*testkit.Sink{}
	for _, id := range spreadIDs {
		subMasters[s.master(t, "{"+id+"}")] = true // the slot the id's hash tag names
		q := k.DeliveryQueue("", id, tasks.LaneFresh, deploy.ClusterShards)
		pending, _, _, _ := tasks.AsynqQueueKeys(q)
		queueMasters[s.master(t, pending)] = true
		sinks[id] = testkit.NewSink(t, nil)
		b.put(t, tasks.Subscriber{ID: id, URL: sinks[id].URL})
	}
	// The test's premise, not what it proves: pick other ids if it fails.
	if len(subMasters) != 3 || len(queueMasters) < 2 {
		t.Fatalf("the subscribers' slots are on %d masters and their queues on %d; want 3 and at least 2", len(subMasters), len(queueMasters))
	}

	for i, want := range []producer.Outcome{producer.Enqueued, producer.Duplicate} {
		r := b.publish(t, "evt_1", "t")
		if len(r.Targets) != len(spreadIDs) {
			t.Fatalf("publish %d: %d targets, want %d", i+1, len(r.Targets), len(spreadIDs))
		}
		for _, tg := range r.Targets {
			if tg.Outcome != want {
				t.Fatalf("publish %d: %s is %s (%v), want %s", i+1, tg.SubscriberID, tg.Outcome, tg.Err, want)
			}
		}
	}
	for _, id := range spreadIDs {
		testkit.Eventually(t, 10*time.Second, "completion for "+id, func() bool {
			st, _, err := testkit.Ended(b.insp, b.rdb, b.ns, id, "evt_1")
			return err == nil && st == asynq.TaskStateCompleted
		})
	}
	// Delivered, their records keep the ids: a third publish is a duplicate too.
	for _, tg := range b.publish(t, "evt_1", "t").Targets {
		if tg.Outcome != producer.Duplicate {
			t.Fatalf("publish after completion: %s is %s, want duplicate", tg.SubscriberID, tg.Outcome)
		}
	}
	testkit.Eventually(t, 5*time.Second, "the queues settled", func() bool { return b.settled(t) })
	for _, id := range spreadIDs {
		if n := sinks[id].Count(); n != 1 {
			t.Errorf("%s received %d requests, want exactly 1", id, n)
		}
	}
}

// A subscriber limited to 20/s, burst 5: no window holds more than
// burst + rate·t arrivals, and the steady rate is within 5%.
func (s *clusterSuite) limit(t *testing.T) {
	const n, rate, burst = 60, 20, 5
	b := s.on(t, worker.Config{})
	sink := testkit.NewSink(t, nil)
	b.put(t, tasks.Subscriber{ID: "acme", URL: sink.URL, Limit: limits.Limit{Rate: rate, Burst: burst, Period: time.Second}})
	for i := range n {
		b.publish(t, fmt.Sprintf("e%03d", i), "t")
	}
	testkit.Eventually(t, 20*time.Second, "every delivery", func() bool { return sink.Count() >= n })
	a := sink.Got()
	if len(a) != n {
		t.Fatalf("%d deliveries, want %d", len(a), n)
	}
	withinLimit(t, a, rate, burst, 50*time.Millisecond) // the load harness's slack under -race
	steady := float64(n-burst-1) / a[n-1].At.Sub(a[burst].At).Seconds()
	if steady < rate*0.95 || steady > rate*1.05 {
		t.Fatalf("steady rate %.2f/s, want within 5%% of %d/s", steady, rate)
	}
	t.Logf("steady rate %.2f/s for a %d/s limit", steady, rate)
}

// An endpoint answers one request 429 with Retry-After: 2 while others are
// in flight: those already on their way arrive, nothing else before the
// deadline, every event after it (obeysRetryAfterInFlight).
func (s *clusterSuite) retryAfter(t *testing.T) {
	b := s.on(t, worker.Config{})
	overlap, after := obeysRetryAfterInFlight(t, b, "delta", limits.PerSecond(1000))
	if after == 0 {
		t.Fatalf("every request (%d) arrived with the 429: the case proves nothing", overlap)
	}
	testkit.Eventually(t, 5*time.Second, "the queues settled", func() bool { return b.settled(t) })
	if st, err := worker.ReadStats(context.Background(), b.rdb, b.ns, "delta"); err != nil || st["deferred:retry_after"] != 1 {
		t.Fatalf("counters %v, %v: want one retry_after deferral", st, err)
	}
	t.Logf("%d requests were in flight with the 429, %d waited for its deadline", overlap, after)
}

// Two subscribers on different masters answer 500: after two attempts
// their events are in the ledger, listed by subscriber and all together
// (the global index is in a slot of its own), and a replay delivers each
// once the endpoints are healthy.
func (s *clusterSuite) deadLetterReplay(t *testing.T) {
	ctx := context.Background()
	b := s.on(t, worker.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	subs := []string{"crm", "delta"}
	if s.master(t, "{"+subs[0]+"}") == s.master(t, "{"+subs[1]+"}") {
		t.Fatalf("%v share a master; the case wants two", subs)
	}
	var healthy atomic.Bool
	sinks := map[string]*testkit.Sink{}
	for _, id := range subs {
		sinks[id] = testkit.NewSink(t, func(w http.ResponseWriter, _ int) {
			if !healthy.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
		b.put(t, tasks.Subscriber{ID: id, URL: sinks[id].URL, MaxAttempts: 2})
	}
	events := []string{"e1", "e2"}
	for _, e := range events {
		b.publish(t, e, "t")
	}
	var all []tasks.DeadLetter
	testkit.Eventually(t, 20*time.Second, "four ledger entries", func() bool {
		all = b.dead(t, producer.DeadLetterQuery{})
		return len(all) == 4
	})
	for _, e := range all {
		if e.Reason != worker.DeadAttempts || len(e.Attempts) != 2 || e.Attempts[1].Status != 500 || e.Event == nil {
			t.Fatalf("ledger entry %+v; want reason attempts with two 500s and the event", e)
		}
	}
	for _, id := range subs {
		if dl := b.dead(t, producer.DeadLetterQuery{Subscriber: id}); len(dl) != 2 {
			t.Fatalf("%s's dead letters: %+v; want its two events", id, dl)
		}
	}
	healthy.Store(true)
	out, next, err := b.p.Replay(ctx, producer.DeadLetterQuery{})
	if err != nil || len(out) != 4 || next != "" {
		t.Fatalf("Replay = %+v, %q, %v; want four replayed", out, next, err)
	}
	for _, o := range out {
		if o.Outcome != producer.Enqueued {
			t.Fatalf("Replay outcome %+v, want enqueued", o)
		}
	}
	for _, id := range subs {
		testkit.Eventually(t, 10*time.Second, "the redeliveries to "+id, func() bool { return sinks[id].Count() == 6 })
	}
	testkit.Eventually(t, 5*time.Second, "the queues settled", func() bool { return b.settled(t) })
	for _, id := range subs {
		got := map[string]int{}
		for _, a := range sinks[id].Got()[4:] {
			got[a.ID]++
		}
		if len(got) != 2 || got["e1"] != 1 || got["e2"] != 1 || sinks[id].Count() != 6 {
			t.Fatalf("%s after the replay: %v, %d requests; want e1 and e2 once each", id, got, sinks[id].Count())
		}
	}
	if dl := b.dead(t, producer.DeadLetterQuery{}); len(dl) != 0 {
		t.Fatalf("%d replayed entries still listed as dead, the first %s", len(dl), dl[0].TaskID)
	}
}

// A subscriber whose host name resolves to loopback, with loopback not
// allowed, is refused before any dial and dead-lettered. A DNS server on
// 127.0.0.1 answers the name; no packet leaves the machine.
func (s *clusterSuite) ssrfRefusal(t *testing.T) {
	dns := testkit.NewDNS(t, map[string]string{"hooks.customer.test": "127.0.0.1"})
	b := s.on(t, worker.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Resolver: dns.Resolver()})
	sink := testkit.NewSink(t, nil)
	port := sink.URL[strings.LastIndex(sink.URL, ":")+1:]
	b.put(t, tasks.Subscriber{ID: "fox", URL: "http://hooks.customer.test:" + port + "/hooks"})
	b.publish(t, "e", "t")
	var st asynq.TaskState
	testkit.Eventually(t, 10*time.Second, "the task to end", func() bool {
		var err error
		st, _, err = testkit.Ended(b.insp, b.rdb, b.ns, "fox", "e")
		return err == nil && (st == asynq.TaskStateArchived || st == asynq.TaskStateCompleted)
	})
	if n := sink.Count(); n != 0 || st != asynq.TaskStateArchived {
		t.Fatalf("the refused endpoint received %d requests, its task is %s; want none, archived", n, st)
	}
	dl := b.dead(t, producer.DeadLetterQuery{})
	if len(dl) != 1 || dl[0].Reason != worker.DeadRefused || !strings.Contains(dl[0].Error, "127.0.0.1 is a private, loopback") {
		t.Fatalf("ledger %+v; want one entry refused for the resolved 127.0.0.1", dl)
	}
}

// Every master holds keys of the dedup case's subscribers (their hash tags
// spread them), and its delivery queues are on more than one master (6
// shards per lane on a cluster), as each node itself lists its keys.
func (s *clusterSuite) keysOnEveryMaster(t *testing.T) {
	if s.dedupNS == "" {
		t.Skip("needs the dedup case, which did not run")
	}
	ctx := context.Background()
	type tally struct {
		subKeys, all int             // the dedup case's subscriber keys; every key of the suite's namespaces
		queues       map[string]bool // the dedup case's queues
	}
	per := map[string]*tally{}
	for _, addr := range s.c.Addrs {
		n := &tally{queues: map[string]bool{}}
		per[addr] = n
		node := redis.NewClient(&redis.Options{Addr: addr})
		iter := node.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if strings.HasPrefix(key, s.dedupNS+":s:{") || strings.HasPrefix(key, "rate:"+s.dedupNS+":s:{") {
				n.subKeys++
			}
			if q, ok := strings.CutPrefix(key, "asynq:{"+s.dedupNS+":"); ok {
				n.queues[q[:strings.IndexByte(q, '}')]] = true
			}
			for _, ns := range s.namespaces {
				if strings.HasPrefix(key, ns+":") || strings.Contains(key, "{"+ns+":") || strings.HasPrefix(key, "rate:"+ns+":") {
					n.all++
					break
				}
			}
		}
		err := iter.Err()
		node.Close()
		if err != nil {
			t.Fatalf("SCAN %s: %v", addr, err)
		}
	}
	withQueues := 0
	var lines []string
	for _, addr := range s.c.Addrs {
		n := per[addr]
		if n.subKeys == 0 {
			t.Errorf("master %s holds no key of %s's subscribers", addr, s.dedupNS)
		}
		if len(n.queues) > 0 {
			withQueues++
		}
		lines = append(lines, fmt.Sprintf("%s: %d keys, %d of %s's subscribers, its queues %v",
			addr, n.all, n.subKeys, s.dedupNS, slices.Sorted(maps.Keys(n.queues))))
	}
	if withQueues < 2 {
		t.Errorf("the queues of %s are on %d master(s); want more than one", s.dedupNS, withQueues)
	}
	t.Logf("per master: %s", strings.Join(lines, "; "))
}
