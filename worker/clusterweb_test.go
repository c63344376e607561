package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/worker"
)

// webToken is the API token of the web servers these tests start.
const webToken = "test-token-0123456789abcdef"

// webClient calls a web.Server's API over real HTTP on 127.0.0.1.
type webClient struct {
	srv *httptest.Server
}

// startWeb starts a web.Server for cfg (token, a quiet logger and, unless
// set, loopback allowed filled in) behind an httptest server, both closed when the test ends.
func startWeb(t testing.TB, cfg web.Config) *webClient {
	t.Helper()
	cfg.Addr, cfg.Token = "127.0.0.1:0", webToken
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.AllowedCIDRs == nil {
		cfg.AllowedCIDRs = testkit.Loopback // the sinks are on 127.0.0.1
	}
	s, err := web.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	return &webClient{srv: srv}
}

// call makes a request with the token (body: nil, a string sent as is, or
// a value sent as JSON) and returns the status and body; a transport error
// is status 0 and the error's text.
func (c *webClient) call(method, path string, body any) (int, string) {
	return c.do(method, path, body, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+webToken) })
}

// monitor gets an asynqmon path, with the token as a browser sends it.
func (c *webClient) monitor(path string) (int, string) {
	return c.do("GET", path, nil, func(r *http.Request) { r.SetBasicAuth("", webToken) })
}

func (c *webClient) do(method, path string, body any, auth func(*http.Request)) (int, string) {
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		j, _ := json.Marshal(v)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.srv.URL+path, rd)
	if err != nil {
		return 0, err.Error()
	}
	auth(req)
	resp, err := c.srv.Client().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// The web process on a Cluster: ready, a subscriber put and read back,
// events published through the API (the second time a duplicate) and
// delivered by the worker, its status, the dead letters and the metrics.
func (s *clusterSuite) webAPI(t *testing.T) {
	b := s.on(t, worker.Config{})
	w := startWeb(t, web.Config{RedisConfig: s.cfg, Namespace: b.ns})
	sink := testkit.NewSink(t, nil)
	if code, body := w.call("GET", "/readyz", nil); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if code, body := w.call("PUT", "/v1/subscribers/echo", map[string]any{"url": sink.URL}); code != http.StatusCreated {
		t.Fatalf("PUT /v1/subscribers/echo: %d %s", code, body)
	}
	var got tasks.Subscriber
	if code, body := w.call("GET", "/v1/subscribers/echo", nil); code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || got.URL != sink.URL {
		t.Fatalf("GET /v1/subscribers/echo: %d %s", code, body)
	}
	var list struct{ Subscribers []tasks.Subscriber }
	if code, body := w.call("GET", "/v1/subscribers", nil); code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil ||
		len(list.Subscribers) != 1 || list.Subscribers[0].ID != "echo" {
		t.Fatalf("GET /v1/subscribers: %d %s", code, body)
	}
	ev := `{"id":"evt_w","type":"t","data":{"n":1}}`
	for _, want := range []struct {
		code    int
		outcome producer.Outcome
	}{{http.StatusAccepted, producer.Enqueued}, {http.StatusOK, producer.Duplicate}} {
		code, body := w.call("POST", "/v1/events", ev)
		var res producer.PublishResult
		if err := json.Unmarshal([]byte(body), &res); err != nil || code != want.code || len(res.Targets) != 1 || res.Targets[0].Outcome != want.outcome {
			t.Fatalf("POST /v1/events: %d %s; want %d and %s", code, body, want.code, want.outcome)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the delivery", func() bool { return sink.Count() == 1 })
	testkit.Eventually(t, 5*time.Second, "the delivery counted", func() bool {
		code, body := w.call("GET", "/metrics", nil)
		return code == http.StatusOK && strings.Contains(body, "hooklane_redis_up 1") &&
			strings.Contains(body, `hooklane_deliveries_total{outcome="delivered"} 1`) // every subscriber together
	})
	if code, body := w.call("GET", "/v1/subscribers/echo/status", nil); code != http.StatusOK {
		t.Fatalf("GET /v1/subscribers/echo/status: %d %s", code, body)
	}
	if code, body := w.call("GET", "/v1/dead-letters", nil); code != http.StatusOK {
		t.Fatalf("GET /v1/dead-letters: %d %s", code, body)
	}
	for _, path := range []string{"/monitoring/api/queues", "/monitoring/api/redis_info", "/monitoring/api/servers"} {
		if code, body := w.monitor(path); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	if n := sink.Count(); n != 1 {
		t.Fatalf("%d requests for one event published twice", n)
	}

	// Paused, an event is held; a new limit and the resume wake it.
	if code, body := w.call("POST", "/v1/subscribers/echo/pause", nil); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	if code, body := w.call("POST", "/v1/events", `{"id":"evt_held","type":"t","data":1,"subscriber_id":"echo"}`); code != http.StatusAccepted {
		t.Fatalf("POST /v1/events to the paused subscriber: %d %s", code, body)
	}
	// Held in the subscriber's schedule until it is resumed.
	testkit.Eventually(t, 10*time.Second, "the event held", func() bool {
		d, err := b.p.GetDelivery(context.Background(), "echo", "evt_held")
		return err == nil && d.State == tasks.StateHeld
	})
	if n := sink.Count(); n != 1 {
		t.Fatalf("%d requests: the paused subscriber's event went out", n)
	}
	put := map[string]any{"url": sink.URL, "rate_limit": map[string]any{"rate": 50, "burst": 5, "period": "1s"}}
	if code, body := w.call("PUT", "/v1/subscribers/echo", put); code != http.StatusOK {
		t.Fatalf("PUT with a new limit: %d %s", code, body)
	}
	if code, body := w.call("POST", "/v1/subscribers/echo/resume", nil); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	testkit.Eventually(t, 10*time.Second, "the held event delivered after the resume", func() bool { return sink.Count() == 2 })
	if code, body := w.call("POST", "/v1/subscribers/echo/secrets/rotate", map[string]string{"grace": "1h"}); code != http.StatusOK {
		t.Fatalf("rotate: %d %s", code, body)
	}
	if code, body := w.call("DELETE", "/v1/subscribers/echo", nil); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code, body := w.call("GET", "/v1/subscribers/echo", nil); code != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d %s", code, body)
	}
}
