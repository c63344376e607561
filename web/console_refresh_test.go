package web_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
)

// A page reloads itself every 2 s while a delivery it shows is pending or
// in flight, at a waiting one's next attempt within the minute, and never
// for one that is final, held, or waits longer.
func TestConsoleRefreshFor(t *testing.T) {
	now := time.Date(2026, 7, 11, 8, 0, 0, 0, time.UTC)
	d := func(state string, next time.Duration) tasks.DeliveryRecord {
		r := tasks.DeliveryRecord{State: state, DueAt: now.Add(-time.Hour)}
		if next != 0 {
			r.NextAttempt = now.Add(next)
		}
		return r
	}
	for _, c := range []struct {
		name string
		ds   []tasks.DeliveryRecord
		want int
	}{
		{"none", nil, 0},
		{"delivered and dead", []tasks.DeliveryRecord{d(tasks.StateDelivered, 0), d(tasks.StateDead, 0)}, 0},
		{"pending", []tasks.DeliveryRecord{d(tasks.StateDelivered, 0), d(tasks.StatePending, 0)}, 2},
		{"in flight", []tasks.DeliveryRecord{d(tasks.StateInFlight, 0)}, 2},
		{"held", []tasks.DeliveryRecord{d(tasks.StateHeld, 0)}, 0},
		{"retrying in 10.5 s", []tasks.DeliveryRecord{d(tasks.StateRetrying, 10500*time.Millisecond)}, 11},
		{"retrying in 300 ms", []tasks.DeliveryRecord{d(tasks.StateRetrying, 300*time.Millisecond)}, 2},
		{"cooling for an hour", []tasks.DeliveryRecord{d(tasks.StateCooling, time.Hour)}, 0},
		{"scheduled tomorrow", []tasks.DeliveryRecord{{State: tasks.StateScheduled, DueAt: now.Add(24 * time.Hour)}}, 0},
		{"scheduled in 30 s", []tasks.DeliveryRecord{{State: tasks.StateScheduled, DueAt: now.Add(30 * time.Second)}}, 31},
		{"the soonest", []tasks.DeliveryRecord{d(tasks.StateRetrying, 40*time.Second), d(tasks.StateCooling, 5*time.Second)}, 6},
	} {
		if got := web.RefreshFor(now, c.ds...); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// The delivery, subscriber, event and deliveries pages reload themselves
// while a delivery they show is in flight, and stop once it is delivered;
// a page of deliveries waiting for tomorrow does not.
func TestConsolePagesRefreshWhileUnderWay(t *testing.T) {
	b := setup(t, fastRetries)
	release := make(chan struct{})
	s := testkit.NewSink(t, func(http.ResponseWriter, int) { <-release })
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": s.URL, "event_types": []string{"now"}})
	b.call(t, "PUT", "/v1/subscribers/w", map[string]any{"url": s.URL, "event_types": []string{"later"}})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"now","data":1}`)
	b.call(t, "POST", "/v1/events", `{"id":"e2","type":"later","data":1,"not_before":"`+later()+`"}`)
	b.waitState(t, "s", "e1", tasks.StateInFlight)

	refresh := regexp.MustCompile(`<body data-refresh="(\d+)">`)
	pages := []string{"/console/subscribers/s/deliveries/e1", "/console/subscribers/s", "/console/events/e1", "/console/deliveries?type=now"}
	for _, path := range pages {
		if m := refresh.FindStringSubmatch(b.consoleGet(t, path).body); m == nil || m[1] != "2" {
			t.Errorf("GET %s while e1 is in flight: refresh %v, want every 2 s", path, m)
		}
	}
	for _, path := range []string{"/console/subscribers/w/deliveries/e2", "/console/subscribers/w", "/console/events/e2", "/console/deliveries?type=later"} {
		if p := b.consoleGet(t, path); p.status != 200 || refresh.MatchString(p.body) {
			t.Errorf("GET %s, a delivery due tomorrow: %d, reloads itself", path, p.status)
		}
	}
	close(release)
	b.waitState(t, "s", "e1", tasks.StateDelivered)
	for _, path := range pages {
		if body := b.consoleGet(t, path).body; refresh.MatchString(body) || !regexp.MustCompile(`<body>`).MatchString(body) {
			t.Errorf("GET %s once e1 is delivered: still reloads itself", path)
		}
	}
}
