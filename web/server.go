package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Server is hooklane's HTTP process.
type Server struct {
	cfg     Config
	rdb     redis.UniversalClient
	p       *producer.Producer // the operator's: every tenant's
	def     *producer.Producer // the default tenant's: the routes without a tenant
	tenants tenantCache
	tokens  tokenCache
	ingest  *ingestLimiter
	places  *publishPlaces
	gates   *limits.Gates // read only: every write goes through p
	insp    *asynq.Inspector
	mon     *asynqmon.HTTPHandler
	console *console
	handler http.Handler

	closeOnce sync.Once
	closeErr  error
}

// New builds a Server. It does not contact Redis until a request needs it,
// so that the process starts (and answers /healthz) while Redis is down.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// An API client waiting on a dead Redis wants its 503 now, not after
	// go-redis's default 5 dials times 3 retries.
	rdb, err := cfg.RedisConfig.NewClient(deploy.ClientTuning{DialerRetries: 1, MaxRetries: 1, PoolSize: poolSize(cfg.RedisConfig)})
	if err != nil {
		return nil, fmt.Errorf("web: %w", err)
	}
	s := &Server{cfg: cfg, rdb: rdb}
	s.p, err = producer.New(&producer.Config{Redis: s.rdb, Namespace: cfg.Namespace, Logger: cfg.Logger,
		DedupWindow: cfg.DedupWindow, PayloadRetention: cfg.PayloadRetention, MaxNotBefore: cfg.MaxNotBefore,
		AllowedCIDRs: cfg.AllowedCIDRs, MaxRegions: cfg.MaxRegions, MaxWait: cfg.MaxWait, BatchAfter: cfg.BatchAfter,
		TenantFreshRate: cfg.TenantFreshRate})
	if err != nil {
		s.rdb.Close()
		return nil, err
	}
	s.def, _ = s.p.Tenant(tasks.DefaultTenant) // a valid name: cannot fail
	s.tenants.m = map[string]cachedTenant{}
	s.tokens.m, s.tokens.touched = map[[32]byte]cachedToken{}, map[string]time.Time{}
	s.gates = limits.NewGates(s.rdb)
	s.ingest = newIngestLimiter(s)
	s.places = newPublishPlaces(cfg.MaxPublishes)
	s.insp = asynq.NewInspectorFromRedisClient(s.rdb)
	// asynqmon wants an asynq.RedisConnOpt rather than a client: the same
	// connection, in the same mode.
	s.mon = newMonitor("/monitoring", cfg.RedisConfig.AsynqConnOpt(), cfg.MonitorWrites)
	if s.console, err = newConsole(s); err != nil {
		s.mon.Close()
		s.rdb.Close()
		return nil, err
	}
	s.handler = s.routes()
	return s, nil
}

// Handler serves every route.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", guard(s.cfg.MetricsToken, "Bearer", s.metricsHandler()))
	// The API's contract is open: it describes the API, and holds no data.
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	mux.Handle("/v1/", s.apiGuard(s.api()))
	// Basic, so that a browser asks for the token as a password.
	mux.Handle("/monitoring/", guard(s.cfg.Token, "Basic", s.mon))
	mux.Handle("/monitoring", guard(s.cfg.Token, "Basic", http.RedirectHandler("/monitoring/", http.StatusFound)))
	// The console: asynqmon's neighbour, behind the same token and prompt.
	mux.Handle("/console/", s.consoleHeaders(s.consoleGuard(s.console.handler())))
	mux.Handle("GET /portal/{link}", s.consoleHeaders(http.HandlerFunc(s.openPortal)))
	mux.Handle("/console", guard(s.cfg.Token, "Basic", http.RedirectHandler("/console/", http.StatusFound)))
	mux.Handle("GET /{$}", http.RedirectHandler("/monitoring/", http.StatusFound))
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		writeError(w, s.cfg.Logger, fmt.Errorf("%w: %v", producer.ErrRedisUnavailable, err), nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// Run listens on Config.Addr and serves until ctx is done (SIGTERM).
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then lets requests in progress
// finish for up to ShutdownTimeout, and closes the Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.Close()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	s.cfg.Logger.Info("web listening", "addr", ln.Addr().String(), "namespace", s.cfg.Namespace, "auth", s.cfg.Token != "",
		"redis", s.cfg.RedisConfig) // passwords redacted
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("web stopping", "shutdown_timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// Close releases the Redis connections; calling it again does nothing.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		// The inspector and producer share rdb and are not closed apart.
		s.closeErr = errors.Join(s.mon.Close(), s.rdb.Close())
	})
	return s.closeErr
}

// WebPoolSize is the most Redis connections (per node) hooklane web keeps,
// unless REDIS_URL names its own (pool_size): a publish makes several
// round trips one after the other, and under a spike of publishes
// go-redis' default of 10 a core (20 on 2 cores) queued each of them for a
// connection: seed 003's spike (2,000 publishes/s) waited 9.4 s at p99
// against 0.59 s with 200 (BenchmarkPublishSpike; deploy/BENCHMARKS.md,
// "The publish path under a spike"). Connections open as they are needed.
const WebPoolSize = 200

// poolSize is the tuning's pool size for c: WebPoolSize, or 0 (the URL's
// own) when c's URL names one.
func poolSize(c deploy.RedisConfig) int {
	if u, err := url.Parse(c.URL); err == nil && u.Query().Has("pool_size") {
		return 0
	}
	return WebPoolSize
}
