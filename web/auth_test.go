package web_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/web"
)

// Every /v1/, /monitoring/ (asynqmon's own API included) and /metrics
// request is refused without the token, however it is presented wrong.
func TestAuthRefusedOnEveryProtectedPath(t *testing.T) {
	b := setup(t, nil)
	b.call(t, "PUT", "/v1/subscribers/s", map[string]any{"url": "http://127.0.0.1:9/x"})
	b.call(t, "POST", "/v1/events", `{"id":"e1","type":"t","data":1}`) // so the queue exists
	paths := []struct{ method, path string }{
		{"GET", "/v1/subscribers"}, {"PUT", "/v1/subscribers/s"}, {"GET", "/v1/subscribers/s"},
		{"DELETE", "/v1/subscribers/s"}, {"POST", "/v1/subscribers/s/pause"}, {"POST", "/v1/subscribers/s/resume"},
		{"POST", "/v1/subscribers/s/secrets/rotate"}, {"GET", "/v1/subscribers/s/status"}, {"POST", "/v1/subscribers/s/test"}, {"POST", "/v1/events"},
		{"GET", "/v1/dead-letters"}, {"POST", "/v1/dead-letters/replay"}, {"DELETE", "/v1/dead-letters/s:e1"},
		{"GET", "/v1/no-such-endpoint"},
		{"GET", "/monitoring"}, {"GET", "/monitoring/"}, {"GET", "/monitoring/queues/" + b.ns},
		{"GET", "/monitoring/static/js/main.js"},
		{"GET", "/monitoring/api/queues"}, {"GET", "/monitoring/api/queues/" + b.ns},
		{"GET", "/monitoring/api/queues/" + b.ns + "/pending_tasks"}, {"GET", "/monitoring/api/queues/" + b.ns + "/tasks/s:e1"},
		{"DELETE", "/monitoring/api/queues/" + b.ns}, {"POST", "/monitoring/api/queues/" + b.ns + ":pause"},
		{"GET", "/monitoring/api/servers"}, {"GET", "/monitoring/api/redis_info"}, {"GET", "/monitoring/api/queue_stats"},
		{"GET", "/metrics"},
		{"GET", "/console/"}, {"GET", "/console/subscribers"}, {"GET", "/console/subscribers/s"}, {"GET", "/console/events/e1"},
		{"GET", "/console/static/console.js"}, {"POST", "/console/subscribers/s/pause"}, {"POST", "/console/subscribers/s/replay"},
	}
	wrong := map[string]func(*http.Request){
		"no credentials": nil,
		"wrong bearer":   func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") },
		"token prefix":   func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token[:len(token)-1]) },
		"wrong password": func(r *http.Request) { r.SetBasicAuth("admin", "nope") },
		"token as user":  func(r *http.Request) { r.SetBasicAuth(token, "") },
		"other scheme":   func(r *http.Request) { r.Header.Set("Authorization", "Token "+token) },
	}
	for _, p := range paths {
		for name, auth := range wrong {
			r := b.callRaw(t, p.method, p.path, `{}`, auth)
			if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s, %s: %d; want 401 with WWW-Authenticate", p.method, p.path, name, r.status)
				continue
			}
			if code, _ := r.errorOf(t); code != "unauthorized" {
				t.Errorf("%s %s: error code %q", p.method, p.path, code)
			}
		}
	}
	// The queue survived every refused DELETE and pause above.
	if q, err := testkit.QueueInfo(b.insp, b.ns); err != nil || q.Paused || q.Size != 1 {
		t.Fatalf("queue after refused requests: %+v, %v", q, err)
	}
	// A browser gets a basic-auth prompt for the UI.
	if r := b.callAuth(t, "GET", "/monitoring/", nil, nil); !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("UI challenge %q, want Basic", r.header.Get("WWW-Authenticate"))
	}
	// The right token passes, as bearer or as any user's basic password.
	for name, auth := range map[string]func(*http.Request){
		"bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) },
		"basic":  func(r *http.Request) { r.SetBasicAuth("anyone", token) },
	} {
		for _, path := range []string{"/v1/subscribers", "/monitoring/", "/monitoring/api/queues", "/metrics"} {
			if r := b.callAuth(t, "GET", path, nil, auth); r.status != 200 {
				t.Errorf("GET %s with %s: %d %s", path, name, r.status, r.body)
			}
		}
	}
	// Health checks stay open.
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := b.callAuth(t, "GET", path, nil, nil); r.status != 200 {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
}

func TestMetricsToken(t *testing.T) {
	t.Parallel()
	s, err := web.New(web.Config{Token: token, MetricsToken: "metrics-token-0123456789", RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: "mt", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func(path, tok string) int {
		req, _ := http.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		checkAnswer(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
		return rec.Code
	}
	if got := get("/metrics", "metrics-token-0123456789"); got != 200 {
		t.Errorf("metrics with its token: %d", got)
	}
	if got := get("/metrics", token); got != 401 {
		t.Errorf("metrics with the API token: %d, want 401", got)
	}
	if got := get("/v1/subscribers", "metrics-token-0123456789"); got != 401 {
		t.Errorf("API with the metrics token: %d, want 401", got)
	}
}

func TestConfigRefusesToStartWithoutToken(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr, token string
		ok          bool
	}{
		{":8080", "", false},
		{"0.0.0.0:8080", "", false},
		{"[::]:8080", "", false},
		{"127.0.0.1:8080", "", true},
		{"localhost:8080", "", true},
		{"[::1]:8080", "", true},
		{":8080", "short", false},
		{":8080", token, true},
		{"nonsense", token, false},
	} {
		s, err := web.New(web.Config{Addr: tt.addr, Token: tt.token, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Logger: quiet})
		if (err == nil) != tt.ok {
			t.Errorf("addr %q token %q: err %v, want ok=%v", tt.addr, tt.token, err, tt.ok)
		}
		if err == nil {
			s.Close()
		} else if !strings.Contains(err.Error(), "HOOKLANE_") {
			t.Errorf("error %q does not name the variable", err)
		}
	}
}

// With no token (loopback only), a request whose Host is not a loopback
// name — a DNS-rebinding page — is refused.
func TestNoTokenServesLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: "notoken", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "localhost:8080": 200, "[::1]:8080": 200, "evil.example:8080": 403} {
		req, _ := http.NewRequest("GET", "/v1/subscribers", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		// Without credentials the request is off the contract (which asks
		// for them); the answer is not.
		checkAnswer(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
		if rec.Code != want {
			t.Errorf("Host %s: %d, want %d", host, rec.Code, want)
		}
	}
}

func TestRedisDownIs503(t *testing.T) {
	t.Parallel()
	s, err := web.New(web.Config{Token: token, RedisConfig: deploy.RedisConfig{URL: "redis://127.0.0.1:1/0"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: newServer(t, s.Handler())}
	defer s.Close()
	if r := b.callAuth(t, "GET", "/healthz", nil, nil); r.status != 200 {
		t.Errorf("healthz: %d", r.status)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"GET", "/v1/subscribers", ""},
		{"GET", "/v1/subscribers/s", ""},
		{"PUT", "/v1/subscribers/s", `{"url":"https://a.test"}`},
		{"POST", "/v1/events", `{"id":"e","type":"t","data":1}`},
		{"GET", "/v1/subscribers/s/status", ""},
		{"GET", "/v1/dead-letters", ""},
		{"POST", "/v1/dead-letters/replay", `{"all":true}`},
	} {
		r := b.call(t, c.method, c.path, c.body)
		if code, _ := r.errorOf(t); r.status != 503 || code != "redis_unavailable" {
			t.Errorf("%s %s: %d %s; want 503 redis_unavailable", c.method, c.path, r.status, r.body)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("%s %s: 503 with Retry-After %q; want whole seconds", c.method, c.path, r.header.Get("Retry-After"))
		}
	}
	// Validation still answers first: a bad request is 422 even so.
	if r := b.callRaw(t, "PUT", "/v1/subscribers/s", `{"url":"ftp://a"}`, bearer); r.status != 422 {
		t.Errorf("invalid PUT with Redis down: %d", r.status)
	}
}

// Serve answers until its context ends (SIGTERM), then returns.
func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	resp, err := checkedClient(t).Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Fatal("still answering after shutdown")
	}
}

// The web process rides out a Redis outage: /readyz reports it, /healthz
// does not, and both recover on their own when Redis is back.
func TestReadinessFollowsRedis(t *testing.T) {
	dir := t.TempDir()
	r, err := deploy.StartRedis(context.Background(), deploy.RedisOpts{Dir: dir, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	port := r.Addr[strings.LastIndex(r.Addr, ":")+1:]
	s, err := web.New(web.Config{Addr: "127.0.0.1:0", Token: token, RedisConfig: deploy.RedisConfig{URL: r.URL}, Namespace: "ready", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	defer s.Close()
	status := func(path string) int {
		resp, err := checkedClient(t).Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testkit.Eventually(t, 5*time.Second, "ready", func() bool { return status("/readyz") == 200 })
	r.Stop()
	testkit.Eventually(t, 10*time.Second, "not ready while Redis is down", func() bool { return status("/readyz") == 503 })
	if got := status("/healthz"); got != 200 {
		t.Fatalf("/healthz %d while Redis is down; the process is up", got)
	}
	p, _ := strconv.Atoi(port)
	r, err = deploy.StartRedis(context.Background(), deploy.RedisOpts{Dir: dir, Port: p, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	testkit.Eventually(t, 10*time.Second, "ready again", func() bool { return status("/readyz") == 200 })
}
