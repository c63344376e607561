package web

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// Config configures a Server. Zero fields take the defaults named; FromEnv
// reads each from the environment variable named.
type Config struct {
	// Addr (HOOKLANE_ADDR, else ":$PORT") is where to listen. Default ":8080".
	Addr string
	// Token (HOOKLANE_API_TOKEN) guards /v1/ and /monitoring/. Required,
	// of at least 16 characters, unless Addr listens on loopback only.
	Token string
	// MetricsToken (HOOKLANE_METRICS_TOKEN) guards /metrics, so that a
	// Prometheus can scrape without the API token. Default Token.
	MetricsToken string
	// RedisConfig (REDIS_URL, or HOOKLANE_REDIS_CLUSTER_ADDRS, or
	// HOOKLANE_REDIS_SENTINEL_ADDRS and _MASTER, with HOOKLANE_REDIS_*
	// auth and TLS; see deploy.RedisConfig) must name the worker's Redis.
	// Default one server at redis://127.0.0.1:6379/0.
	RedisConfig deploy.RedisConfig
	// Namespace (HOOKLANE_NAMESPACE) must match the worker's. Default "hooklane".
	Namespace string
	// MonitorWrites (HOOKLANE_MONITOR_WRITES=true) lets asynqmon's buttons
	// change tasks and queues. Default false: read-only, because they work
	// around hooklane's dead-letter ledger and pacing (see newMonitor).
	MonitorWrites bool
	// IngestRate (HOOKLANE_INGEST_RATE) is how many events per second one
	// API token may publish, across every web process (more are answered
	// 429 with a Retry-After); IngestBurst (HOOKLANE_INGEST_BURST) how many
	// at once. Defaults 1,000/s and 2,000.
	IngestRate, IngestBurst int
	// MaxPublishes (HOOKLANE_WEB_MAX_PUBLISHES) is how many publishes
	// (POST /v1/events and /v1/events/batch) this web process serves at
	// once, counted once their body is read; one more is answered 503
	// "overloaded" with a Retry-After and writes nothing, rather than
	// waiting behind the others for Redis and a core (admission.go).
	// Default DefaultMaxPublishes.
	MaxPublishes int
	// MetricsTenants (HOOKLANE_METRICS_TENANTS, comma-separated) are the
	// registered tenants whose counters /metrics shows as series of their
	// own (hooklane_tenant_…, label tenant), at most MaxMetricsTenants:
	// the operator's list bounds the series, however many tenants there are.
	MetricsTenants []string
	// MetricsMaxSubscribers (HOOKLANE_METRICS_MAX_SUBSCRIBERS) caps how
	// many subscribers marked for metrics (Subscriber.Metrics) get series
	// of their own in /metrics: the first ones by id, so that a mistake
	// (marking every subscriber) cannot make a scrape cost more. Default
	// 100, at most MaxMetricsSubscribers; negative (the variable set to 0):
	// none.
	MetricsMaxSubscribers int
	// DedupWindow (HOOKLANE_DEDUP_WINDOW) is how long a delivery's record
	// (and the marker that makes a re-publish a duplicate) outlives the
	// delivery; PayloadRetention (HOOKLANE_PAYLOAD_RETENTION) how long an
	// event's payload is kept for GET /v1/events/{id} and resends. Defaults
	// 24h each (see producer.Config); the workers should agree.
	DedupWindow, PayloadRetention time.Duration
	// MaxNotBefore (HOOKLANE_MAX_NOT_BEFORE) is the furthest ahead a
	// publish's not_before may be (producer.Config.MaxNotBefore).
	MaxNotBefore time.Duration
	// AllowedCIDRs (HOOKLANE_ALLOWED_CIDRS, comma-separated) are the
	// addresses a subscriber URL may name literally although the worker's
	// SSRF guard refuses their kind: give it the workers' list
	// (producer.Config.AllowedCIDRs).
	AllowedCIDRs []netip.Prefix
	// MaxWait (HOOKLANE_MAX_WAIT) is the workers' longest wait for a slot,
	// which a publish's fast path is sized for (producer.Config.MaxWait):
	// give it the workers' value. Default 1s; negative (the variable set
	// to 0): no wait.
	MaxWait time.Duration
	// BatchAfter (HOOKLANE_BATCH_AFTER) is how many of a subscriber's
	// deliveries may wait in asynq as tasks of their own before its new
	// events join its lot and travel in batches (producer.Config.BatchAfter).
	// Default 64; negative (the variable set to 0): no cap.
	BatchAfter int
	// TenantFreshRate (HOOKLANE_TENANT_FRESH_RATE) is how many of one
	// registered tenant's deliveries a second may take the fresh lane
	// (producer.Config.TenantFreshRate): give it the workers' value.
	// Default 200; negative (the variable set to 0): no cap.
	TenantFreshRate int
	// MaxRegions (HOOKLANE_MAX_REGIONS) is how many regions subscribers may
	// name, the default one included (producer.Config.MaxRegions). Default 8.
	MaxRegions int
	// PublicURL (HOOKLANE_PUBLIC_URL) is the origin portal links are made
	// with, such as https://hooks.example.com. Default: the request's.
	PublicURL string
	// PortalFrameAncestors (HOOKLANE_PORTAL_FRAME_ANCESTORS) are the
	// pages that may frame the portal (CSP frame-ancestors sources,
	// space-separated, such as https://app.example.com). Default: none.
	PortalFrameAncestors string
	// MaxBodyBytes caps a request body. Default 1 MiB: an event's data may
	// be 256 KiB, and more once JSON-escaped.
	MaxBodyBytes int64
	// ShutdownTimeout is how long requests in progress may finish after
	// SIGTERM. Default 10s, inside a Procfile host's 30s grace.
	ShutdownTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// MaxMetricsSubscribers is the most Config.MetricsMaxSubscribers may be:
// about 30 series each, 30,000 at most.
const MaxMetricsSubscribers = 1000

// MaxMetricsTenants is the most tenants Config.MetricsTenants may list:
// about 40 series each.
const MaxMetricsTenants = 100

// DefaultMaxPublishes is Config.MaxPublishes' default: at a few
// milliseconds a publish that is over 10,000 publishes a second a
// process, more than one Redis takes, while a spike past what the host
// serves waits at most that many publishes' time (deploy/BENCHMARKS.md,
// "The publish path under a spike").
const DefaultMaxPublishes = 64

// MinTokenLen is the shortest Token accepted.
const MinTokenLen = 16

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, ":8080")
	c.MetricsToken = cmp.Or(c.MetricsToken, c.Token)
	c.RedisConfig = c.RedisConfig.WithDefaults()
	c.Namespace = cmp.Or(c.Namespace, "hooklane")
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 1<<20)
	c.IngestRate = cmp.Or(c.IngestRate, 1000)
	c.IngestBurst = cmp.Or(c.IngestBurst, 2*c.IngestRate)
	c.MaxPublishes = cmp.Or(c.MaxPublishes, DefaultMaxPublishes)
	c.MetricsMaxSubscribers = cmp.Or(c.MetricsMaxSubscribers, 100)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if err := c.RedisConfig.Validate(); err != nil {
		return fmt.Errorf("web: %w", err)
	}
	if err := tasks.ValidateNamespace(c.Namespace); err != nil {
		return fmt.Errorf("web: Namespace (HOOKLANE_NAMESPACE): %w", err)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("web: Addr (HOOKLANE_ADDR or PORT) %q: %v", c.Addr, err)
	}
	switch {
	case c.Token == "" && !IsLoopback(c.Addr):
		return fmt.Errorf("web: Token (HOOKLANE_API_TOKEN) is required when listening on %s; "+
			"set one (e.g. `openssl rand -hex 32`) or listen on 127.0.0.1 only", c.Addr)
	case c.Token != "" && len(c.Token) < MinTokenLen:
		return fmt.Errorf("web: Token (HOOKLANE_API_TOKEN) must be at least %d characters", MinTokenLen)
	case c.MetricsToken != "" && len(c.MetricsToken) < MinTokenLen:
		return fmt.Errorf("web: MetricsToken (HOOKLANE_METRICS_TOKEN) must be at least %d characters", MinTokenLen)
	case c.IngestRate < 1 || c.IngestBurst < 1:
		return fmt.Errorf("web: IngestRate and IngestBurst (HOOKLANE_INGEST_RATE, _BURST) must be at least 1, not %d and %d", c.IngestRate, c.IngestBurst)
	case c.MaxPublishes < 1:
		return fmt.Errorf("web: MaxPublishes (HOOKLANE_WEB_MAX_PUBLISHES) must be at least 1, not %d", c.MaxPublishes)
	case c.MetricsMaxSubscribers > MaxMetricsSubscribers:
		return fmt.Errorf("web: MetricsMaxSubscribers (HOOKLANE_METRICS_MAX_SUBSCRIBERS) must be at most %d, not %d", MaxMetricsSubscribers, c.MetricsMaxSubscribers)
	case c.MaxBodyBytes < 64<<10:
		return errors.New("web: MaxBodyBytes must be at least 64 KiB")
	}
	if len(c.MetricsTenants) > MaxMetricsTenants {
		return fmt.Errorf("web: MetricsTenants (HOOKLANE_METRICS_TENANTS) lists %d tenants; at most %d", len(c.MetricsTenants), MaxMetricsTenants)
	}
	for _, t := range c.MetricsTenants {
		if err := tasks.ValidateTenant(t); err != nil || t == tasks.DefaultTenant {
			return fmt.Errorf("web: MetricsTenants (HOOKLANE_METRICS_TENANTS): %q is not a registered tenant's name (the default tenant's counters are the totals)", t)
		}
	}
	if u, err := url.Parse(c.PublicURL); c.PublicURL != "" && (err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" && u.Path != "/" || u.RawQuery != "") {
		return fmt.Errorf("web: PublicURL (HOOKLANE_PUBLIC_URL) %q: want an origin such as https://hooks.example.com", c.PublicURL)
	}
	for _, src := range strings.Fields(c.PortalFrameAncestors) {
		if strings.ContainsAny(src, ";,\"'") && src != "'self'" {
			return fmt.Errorf("web: PortalFrameAncestors (HOOKLANE_PORTAL_FRAME_ANCESTORS): %q is not a source such as https://app.example.com or 'self'", src)
		}
	}
	return nil
}

// IsLoopback reports whether addr (host:port) listens on loopback only: an
// empty host means every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// FromEnv reads a Config from the environment. Errors name the variable.
func FromEnv() (Config, error) {
	rc, err := deploy.RedisFromEnv(os.Getenv)
	c := Config{
		Addr:         os.Getenv("HOOKLANE_ADDR"),
		Token:        os.Getenv("HOOKLANE_API_TOKEN"),
		MetricsToken: os.Getenv("HOOKLANE_METRICS_TOKEN"),
		RedisConfig:  rc,
		Namespace:    os.Getenv("HOOKLANE_NAMESPACE"),
		// Anything but "true" keeps the UI read-only.
		MonitorWrites:        os.Getenv("HOOKLANE_MONITOR_WRITES") == "true",
		PublicURL:            os.Getenv("HOOKLANE_PUBLIC_URL"),
		PortalFrameAncestors: os.Getenv("HOOKLANE_PORTAL_FRAME_ANCESTORS"),
	}
	if port := os.Getenv("PORT"); c.Addr == "" && port != "" {
		c.Addr = ":" + port
	}
	if v := os.Getenv("HOOKLANE_ALLOWED_CIDRS"); v != "" {
		var perr error
		if c.AllowedCIDRs, perr = tasks.ParseCIDRs(v); perr != nil {
			err = errors.Join(err, fmt.Errorf("web: HOOKLANE_ALLOWED_CIDRS: %w", perr))
		}
	}
	for name, dst := range map[string]*int{"HOOKLANE_INGEST_RATE": &c.IngestRate, "HOOKLANE_INGEST_BURST": &c.IngestBurst,
		"HOOKLANE_MAX_REGIONS": &c.MaxRegions, "HOOKLANE_WEB_MAX_PUBLISHES": &c.MaxPublishes} {
		if v := os.Getenv(name); v != "" {
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 {
				err = errors.Join(err, fmt.Errorf("web: %s=%q: want a whole number of at least 1", name, v))
				continue
			}
			*dst = n
		}
	}
	for name, dst := range map[string]*time.Duration{"HOOKLANE_DEDUP_WINDOW": &c.DedupWindow, "HOOKLANE_PAYLOAD_RETENTION": &c.PayloadRetention,
		"HOOKLANE_MAX_NOT_BEFORE": &c.MaxNotBefore} {
		if v := os.Getenv(name); v != "" {
			d, perr := time.ParseDuration(v)
			if perr != nil || d <= 0 {
				err = errors.Join(err, fmt.Errorf("web: %s=%q: want a positive duration such as 24h", name, v))
				continue
			}
			*dst = d
		}
	}
	if v := os.Getenv("HOOKLANE_MAX_WAIT"); v != "" {
		// as the worker reads it: 0 is no wait at all
		switch d, perr := time.ParseDuration(v); {
		case perr != nil || d < 0 || d > 10*time.Second:
			err = errors.Join(err, fmt.Errorf("web: HOOKLANE_MAX_WAIT=%q: want a duration from 0 (no wait) to 10s", v))
		case d == 0:
			c.MaxWait = -1
		default:
			c.MaxWait = d
		}
	}
	if v := os.Getenv("HOOKLANE_BATCH_AFTER"); v != "" {
		n, perr := producer.ParseBatchAfter(v)
		if perr != nil {
			err = errors.Join(err, fmt.Errorf("web: HOOKLANE_BATCH_AFTER=%q: %w", v, perr))
		}
		c.BatchAfter = n
	}
	if v := os.Getenv("HOOKLANE_METRICS_TENANTS"); v != "" {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				c.MetricsTenants = append(c.MetricsTenants, t)
			}
		}
	}
	if v := os.Getenv("HOOKLANE_TENANT_FRESH_RATE"); v != "" {
		n, perr := producer.ParseTenantFreshRate(v)
		if perr != nil {
			err = errors.Join(err, fmt.Errorf("web: HOOKLANE_TENANT_FRESH_RATE: %w", perr))
		}
		c.TenantFreshRate = n
	}
	if v := os.Getenv("HOOKLANE_METRICS_MAX_SUBSCRIBERS"); v != "" {
		n, perr := strconv.Atoi(v)
		switch {
		case perr != nil || n < 0 || n > MaxMetricsSubscribers:
			err = errors.Join(err, fmt.Errorf("web: HOOKLANE_METRICS_MAX_SUBSCRIBERS=%q: want a whole number from 0 (none) to %d", v, MaxMetricsSubscribers))
		case n == 0:
			c.MetricsMaxSubscribers = -1
		default:
			c.MetricsMaxSubscribers = n
		}
	}
	return c, err
}
