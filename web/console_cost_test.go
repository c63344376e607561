package web_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// publishMany publishes events prefix-0000 … of type typ, from ids from
// to to-1, 32 at a time (each publish is a few round trips: concurrency is
// what keeps 10,000 of them to seconds).
func publishMany(t *testing.T, p *producer.Producer, prefix, typ string, from, to int) {
	t.Helper()
	ids := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range 32 {
		wg.Go(func() {
			for i := range ids {
				ev := tasks.Event{ID: fmt.Sprintf("%s-%05d", prefix, i), Type: typ, Data: []byte(`{"n":1}`)}
				if _, err := p.Publish(context.Background(), ev, nil); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for i := from; i < to; i++ {
		ids <- i
	}
	close(ids)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// A console page runs the same Redis commands, as MONITOR shows them, with
// 10 subscribers or 1,010, 10 deliveries or 2,010, an event fanned out to
// 10 or to 1,010: what it reads is one page, and the pages here are 10
// long (?limit=10, and the chart's ?chart=10), so both sides fill them.
func TestConsolePageCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, hs, p := monitoredWeb(t, "ccost")
	client := hs.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse } // the search's own cost
	get := func(path string) {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		req.SetBasicAuth("operator", token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	commands := func(path string) []string {
		var out []string
		for _, l := range testkit.Monitor(t, srv.Addr, func() { get(path) }) {
			// The command's name, without MONITOR's timestamp and client and
			// without the arguments (times, ids); a new pooled connection's
			// handshake is not the page's work.
			_, cmd, _ := strings.Cut(l, "] ")
			name, _, _ := strings.Cut(strings.ToLower(cmd), " ")
			if name != `"hello"` && name != `"client"` {
				out = append(out, name)
			}
		}
		slices.Sort(out) // a page reads records a few at a time, concurrently
		return out
	}

	// fan-hot gets the hot events and the fan-out; fan-NNNN the fan-out.
	if _, err := p.PutSubscriber(ctx, tasks.Subscriber{ID: "fan-hot", URL: "https://idle.test/h", EventTypes: []string{"hot", "fan"}}); err != nil {
		t.Fatal(err)
	}
	type page struct{ name, few, many string }
	pages := []page{
		{"subscriber list", "/console/subscribers?limit=10", ""},
		{"subscriber list, filtered", "/console/subscribers?limit=10&state=paused", ""},
		{"subscriber search", "/console/subscribers?limit=10&q=fan-", ""},
		{"one subscriber", "/console/subscribers/fan-hot?limit=10&chart=10", ""},
		{"one delivery", "/console/subscribers/fan-hot/deliveries/hot-00000", ""},
		{"one event", "/console/events/fan-few?limit=10", "/console/events/fan-many?limit=10"},
		{"search", "/console/search?q=fan-few", "/console/search?q=fan-many"},
		{"every subscriber's deliveries", "/console/deliveries?subs=10&per=1", ""},
	}
	start := time.Now()
	putMany(t, p, "fan", "fan", 9)        // and fan-hot: 10 subscribers
	publishMany(t, p, "hot", "hot", 0, 9) // and fan-few: 10 deliveries to fan-hot
	if _, err := p.Publish(ctx, tasks.Event{ID: "fan-few", Type: "fan", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	for _, pg := range pages {
		get(pg.few) // scripts loaded, connections opened
	}
	few := make([][]string, len(pages))
	for i, pg := range pages {
		few[i] = commands(pg.few)
	}

	putMany(t, p, "fan", "fan", 1009)         // 1,000 more: 1,010 subscribers
	publishMany(t, p, "hot", "hot", 9, 2_008) // and the two fan-outs: 2,010 deliveries to fan-hot
	if _, err := p.Publish(ctx, tasks.Event{ID: "fan-many", Type: "fan", Data: []byte(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded 1,010 subscribers, 2,010 deliveries and a fan-out to 1,010 in %s", time.Since(start).Round(time.Millisecond))
	if subs, _, err := p.Subscribers(ctx, "", 2000); err != nil || len(subs) != 1010 {
		t.Fatalf("%d subscribers, %v; want 1,010", len(subs), err)
	}
	if ev, err := p.GetEvent(ctx, "fan-many"); err != nil || len(ev.Deliveries) != 1010 {
		t.Fatalf("fan-many went to %d subscribers, %v; want 1,010", len(ev.Deliveries), err)
	}
	for i, pg := range pages {
		path := pg.few
		if pg.many != "" {
			path = pg.many
		}
		many := commands(path)
		if !slices.Equal(few[i], many) {
			t.Errorf("%s: %d commands with 10 and %d with 1,010 subscribers / 2,010 deliveries / a fan-out to 1,010\nfew:  %q\nmany: %q",
				pg.name, len(few[i]), len(many), few[i], many)
			continue
		}
		t.Logf("%s: %d commands both ways (%s)", pg.name, len(many), path)
	}
	// The event page's one GET holds the event's subscriber ids with its
	// payload: its reply grows with the fan-out (about 10 bytes an id here),
	// its commands do not.
	info := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { info.Close() })
	replyBytes := func(path string) int64 {
		sent := func() int64 { return testkit.InfoInt(t, info, "stats", "total_net_output_bytes") }
		before := sent()
		get(path)
		return sent() - before
	}
	t.Logf("the event page read %d bytes from Redis with a fan-out to 10, %d with 1,010",
		replyBytes("/console/events/fan-few?limit=10"), replyBytes("/console/events/fan-many?limit=10"))
	// For the record: the same pages at their default sizes.
	for _, path := range []string{"/console/subscribers", "/console/subscribers/fan-hot", "/console/events/fan-many", "/console/deliveries"} {
		t.Logf("default size %s: %d commands", path, len(commands(path)))
	}
}
