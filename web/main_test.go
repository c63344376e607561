package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/deploy/testkit"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
	"github.com/hooklane/hooklane/web"
	"github.com/hooklane/hooklane/worker"
)

var redisSrv *deploy.Redis

func TestMain(m *testing.M) { testkit.Main(m, &redisSrv) }

const token = "test-token-0123456789abcdef"

// bundle is one test's web server (over real HTTP on 127.0.0.1), its
// namespace, and when asked a worker delivering in that namespace.
type bundle struct {
	ns   string
	srv  *httptest.Server
	rdb  *redis.Client
	p    *producer.Producer
	insp *asynq.Inspector
	w    *worker.Worker // nil without a worker
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup starts a web server; with a non-nil wcfg also a worker.
func setup(t *testing.T, wcfg *worker.Config) *bundle {
	t.Helper()
	return setupWith(t, wcfg, nil)
}

// setupWith is setup with the web server's configuration changed by edit
// (nil: none).
func setupWith(t *testing.T, wcfg *worker.Config, edit func(*web.Config)) *bundle {
	t.Helper()
	t.Parallel()
	ns := testkit.Namespace("web")
	cfg := web.Config{Addr: "127.0.0.1:0", Token: token, AllowedCIDRs: testkit.Loopback, RedisConfig: deploy.RedisConfig{URL: redisSrv.URL}, Namespace: ns, Logger: quiet}
	if edit != nil {
		edit(&cfg)
	}
	s, err := web.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{ns: ns, srv: httptest.NewServer(s.Handler())}
	b.rdb = redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	b.p, _ = producer.New(&producer.Config{AllowedCIDRs: testkit.Loopback, Redis: b.rdb, Namespace: ns, Logger: quiet})
	b.insp = asynq.NewInspectorFromRedisClient(b.rdb)
	t.Cleanup(func() { b.srv.Close(); s.Close(); b.rdb.Close() })
	if wcfg != nil {
		cfg := *wcfg
		cfg.Redis, cfg.Namespace, cfg.Logger = b.rdb, ns, quiet
		cfg.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} // the sinks
		w, err := worker.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.w = w
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		// Registered after the server's cleanup, so it runs first.
		t.Cleanup(func() { cancel(); <-done })
		// Until it serves the region a publish sees no worker and parks a
		// subscriber's events after the first (producer/serving.go).
		testkit.Eventually(t, 10*time.Second, "the worker serving", func() bool {
			return b.rdb.Exists(context.Background(), tasks.Keys(ns).Serving("")).Val() == 1
		})
	}
	return b
}

// fastRetries is a worker that retries counted failures within ~100ms.
var fastRetries = &worker.Config{BackoffBase: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond}

// response is an API answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %s", r.status, r.body)
	}
	return m
}

// errorOf returns the code and field of an error answer.
func (r response) errorOf(t *testing.T) (code, field string) {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("answer %d has no error object: %s", r.status, r.body)
	}
	code, _ = e["code"].(string)
	field, _ = e["field"].(string)
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("error without a message: %s", r.body)
	}
	return code, field
}

// call makes a request with the bearer token; body may be a string (sent
// as is), nil, or a value sent as JSON. The request and its answer are
// validated against the contract (openapi.json).
func (b *bundle) call(t *testing.T, method, path string, body any) response {
	t.Helper()
	return b.callAuth(t, method, path, body, bearer)
}

func bearer(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }

// callAuth is call with the credentials auth sets (none when nil).
func (b *bundle) callAuth(t *testing.T, method, path string, body any, auth func(*http.Request)) response {
	t.Helper()
	return b.do(t, method, path, body, auth, false)
}

// callRaw is callAuth for a request deliberately off the contract:
// malformed JSON, an unknown field, a value out of range, no credentials,
// an undocumented path. Only its answer is validated.
func (b *bundle) callRaw(t *testing.T, method, path string, body any, auth func(*http.Request)) response {
	t.Helper()
	return b.do(t, method, path, body, auth, true)
}

func (b *bundle) do(t *testing.T, method, path string, body any, auth func(*http.Request), raw bool) response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(v)
	default:
		j, _ := json.Marshal(v)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != nil {
		auth(req)
	}
	resp, err := b.client(t, raw).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: out}
}

// client is b's HTTP client, checking what it sends and gets against the
// contract; raw: not what it sends (see callRaw).
func (b *bundle) client(t testing.TB, raw bool) *http.Client {
	c := *b.srv.Client()
	c.Transport = checked{t: t, next: c.Transport, raw: raw}
	return &c
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
