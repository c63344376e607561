package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/worker"
)

// BenchmarkPublishThroughAPI is issue 33's publish figure: 5,000 events to
// 4 subscribers published through the API by 8 concurrent clients, with a
// worker delivering meanwhile to a receiver on 127.0.0.1 (one process:
// web, worker and receiver, on the package's Redis). It reports how fast
// the API took the events (publishes/s, the last call answered) and how
// fast they were delivered (deliveries/s, the 20,000th arrival), one event
// a call (POST /v1/events) and 10, 50 and 100 a call (POST
// /v1/events/batch). The ingest limit is raised out of the way (the
// default 1,000/s would cap the batches).
//
//	go test -run '^$' -bench PublishThroughAPI -benchtime 1x ./web/
func BenchmarkPublishThroughAPI(b *testing.B) {
	const events, subscribers, clients = 5000, 4, 8
	for _, per := range []int{1, 10, 50, 100, -100} {
		name := "single"
		switch {
		case per < 0:
			// The control: the worker started once every event is
			// published, so that it has the host to itself; deliveries/s
			// is then its drain alone, from its start.
			name = fmt.Sprintf("batch%d-then-drain", -per)
		case per > 1:
			name = fmt.Sprintf("batch%d", per)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
				cpu0, rcpu0 := selfCPU(), redisCPU(b, rdb)
				reads0 := testkit.InfoInt(b, rdb, "stats", "total_reads_processed")
				cmds0 := testkit.InfoInt(b, rdb, "stats", "total_commands_processed")
				pub, del := publishThroughAPI(b, events, subscribers, clients, per)
				b.ReportMetric(pub, "publishes/s")
				b.ReportMetric(del, "deliveries/s")
				// What the host's load cannot move: the work done per event.
				b.ReportMetric(float64((selfCPU()-cpu0).Microseconds())/events, "process-cpu-µs/event")
				b.ReportMetric(float64((redisCPU(b, rdb)-rcpu0).Microseconds())/events, "redis-cpu-µs/event")
				b.ReportMetric(float64(testkit.InfoInt(b, rdb, "stats", "total_reads_processed")-reads0)/events, "redis-reads/event")
				b.ReportMetric(float64(testkit.InfoInt(b, rdb, "stats", "total_commands_processed")-cmds0)/events, "redis-commands/event")
				rdb.Close()
			}
		})
	}
}

func publishThroughAPI(b *testing.B, events, subscribers, clients, per int) (publishes, deliveries float64) {
	drainAfter := per < 0
	per = max(per, -per)
	ns := testkit.Namespace("bench")
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, AllowedCIDRs: testkit.Loopback,
		RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: ns, Logger: quiet, IngestRate: 1_000_000, IngestBurst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var arrived atomic.Int64
	done := make(chan time.Time, 1)
	want := int64(events * subscribers)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if arrived.Add(1) == want {
			done <- time.Now()
		}
	}))
	defer sink.Close()
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	w, err := worker.New(worker.Config{Redis: rdb, Namespace: ns, Logger: quiet,
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	run := sync.OnceFunc(func() { go func() { stopped <- w.Run(ctx) }() })
	defer func() { run(); cancel(); <-stopped }()
	if !drainAfter {
		run()
	}

	hc := srv.Client()
	call := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	for i := range subscribers {
		// Fast enough that no limit of theirs holds the drain back.
		body := fmt.Sprintf(`{"url":"%s/s%d","event_types":["video.*"],"rate_limit":{"rate":100000,"burst":100000,"period":"1s"},"max_in_flight":1000}`, sink.URL, i)
		if st, out := call("PUT", fmt.Sprintf("/v1/subscribers/s%d", i), body); st != 201 {
			b.Fatalf("PUT: %d %s", st, out)
		}
	}
	event := func(i int) string {
		return fmt.Sprintf(`{"id":"e%05d","type":"video.trending","data":{"video_id":"vv_%06x","region":"NL","velocity":224.0}}`, i, i)
	}
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				from := int(next.Add(int64(per))) - per
				if from >= events {
					return
				}
				to := min(from+per, events)
				if per == 1 {
					if st, out := call("POST", "/v1/events", event(from)); st != 202 {
						b.Errorf("publish: %d %s", st, out)
					}
					continue
				}
				var body bytes.Buffer
				body.WriteString(`{"events":[`)
				for i := from; i < to; i++ {
					if i > from {
						body.WriteByte(',')
					}
					body.WriteString(event(i))
				}
				body.WriteString(`]}`)
				st, out := call("POST", "/v1/events/batch", body.String())
				var ans web.BatchAnswer
				if err := json.Unmarshal(out, &ans); st != 202 || err != nil || ans.Failed != 0 {
					b.Errorf("batch: %d %.300s", st, out)
				}
			}
		})
	}
	wg.Wait()
	published := time.Since(start)
	if drainAfter {
		start = time.Now()
		run()
	}
	var last time.Time
	select {
	case last = <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d delivered after 2 min", arrived.Load(), want)
	}
	b.StopTimer()
	return float64(events) / published.Seconds(), float64(want) / last.Sub(start).Seconds()
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time Redis has used (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
