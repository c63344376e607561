package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hooklane/hooklane/tasks"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/producer"
)

// Version is sent in the User-Agent header.
var Version = "0.1.0"

// Config configures a worker. Zero fields take the defaults named; FromEnv
// reads each from the environment variable named.
type Config struct {
	// RedisConfig (REDIS_URL, or HOOKLANE_REDIS_CLUSTER_ADDRS, or
	// HOOKLANE_REDIS_SENTINEL_ADDRS and _MASTER, with HOOKLANE_REDIS_*
	// auth and TLS; see deploy.RedisConfig) is used when Redis is nil.
	// Default one server at redis://127.0.0.1:6379/0.
	RedisConfig deploy.RedisConfig
	// Redis, if set, is used as is and not closed; RedisConfig is then
	// ignored.
	Redis redis.UniversalClient
	// Namespace (HOOKLANE_NAMESPACE) must match the producer's. Default "hooklane".
	Namespace string
	// Concurrency (HOOKLANE_CONCURRENCY) is the number of tasks each lane
	// (fresh, backlog) handles at once, including those waiting briefly for
	// a destination. Default 200.
	Concurrency int
	// DequeueLoops (HOOKLANE_DEQUEUE_LOOPS) is how many asynq Servers, each
	// a dequeue loop, every lane runs, its Concurrency split among them.
	// Default 8 (at most Concurrency).
	DequeueLoops int
	// MaxWaiters (HOOKLANE_MAX_WAITERS) caps the tasks of one destination
	// waiting in this process for an in-flight slot (a batch's waiting
	// deliveries are its one task, holding one handler); more are
	// deferred. Default Concurrency/4.
	MaxWaiters int
	// MaxWaiting (HOOKLANE_MAX_WAITING) caps the tasks of all destinations
	// waiting in this process, so that slow destinations cannot hold every
	// handler. Default Concurrency/2.
	MaxWaiting int
	// MaxWait (HOOKLANE_MAX_WAIT) is the longest a task waits in the handler
	// for its destination's in-flight slot or rate limit; longer waits are
	// deferred. Default 1s; NoWait (HOOKLANE_MAX_WAIT=0): none.
	MaxWait time.Duration
	// BatchMax (HOOKLANE_BATCH_MAX) is the most of one subscriber's
	// deliveries a turn hands out as one task (batch.go); 1: every
	// delivery a task of its own. A lone delivery (an idle subscriber's
	// fresh event) is always a task of its own. Default 16, at most 100.
	BatchMax int
	// TenantFreshRate (HOOKLANE_TENANT_FRESH_RATE) is how many of one
	// registered tenant's deliveries a second may take the fresh lane,
	// its publishes' and its turns' together: give the web processes the
	// same (producer.Config.TenantFreshRate). Default 200; negative (the
	// variable set to 0): no cap.
	TenantFreshRate int
	// ConnectTimeout (HOOKLANE_CONNECT_TIMEOUT) bounds dialing and TLS. Default 5s.
	ConnectTimeout time.Duration
	// RequestTimeout (HOOKLANE_REQUEST_TIMEOUT) bounds a whole request. Default 15s.
	RequestTimeout time.Duration
	// MaxRetryAfter (HOOKLANE_MAX_RETRY_AFTER) caps an endpoint's Retry-After. Default 1h.
	MaxRetryAfter time.Duration
	// BackoffBase and BackoffMax (HOOKLANE_BACKOFF_BASE, HOOKLANE_BACKOFF_MAX)
	// shape the exponential backoff with full jitter after a counted
	// failure. Defaults 2s and 10m.
	BackoffBase, BackoffMax time.Duration
	// PollInterval (HOOKLANE_POLL_INTERVAL) is how soon an idle worker
	// finds work another process gave it: asynq's TaskCheckInterval of
	// each fresh lane's first Server (the wait between dequeues of an
	// empty queue, 0.5-1.5 times it; the backlog lane's is twice), and how
	// often a dispatcher idle for 10s looks at its region's ready index
	// for turns other processes asked for (a busy one: every 100ms).
	// Default 500ms: an event published to an idle worker starts within
	// ~0.75s, at ~14 Redis commands/s per idle worker (deploy/BENCHMARKS.md,
	// "Idle cost").
	PollInterval time.Duration
	// RescueInterval (HOOKLANE_RESCUE_INTERVAL) is how often a region's
	// rescuer (rescuer.go) looks at a batch of subscribers for parked,
	// handed-out or running deliveries that no turn is due for; RescueSweep
	// (HOOKLANE_RESCUE_SWEEP) is how long one sweep of every subscriber may
	// take, which sizes the batches. Defaults 10s and 5m.
	RescueInterval, RescueSweep time.Duration
	// ForwardInterval (HOOKLANE_FORWARD_INTERVAL) is asynq's
	// DelayedTaskCheckInterval of each lane's first Server: how often the
	// tasks asynq itself retries (an infrastructure error, a delivery a
	// live run elsewhere holds) are moved to pending when due. Default 1s
	// (asynq's retry times are whole seconds): they go within ~2s of due.
	ForwardInterval time.Duration
	// ShutdownTimeout (HOOKLANE_SHUTDOWN_TIMEOUT) is how long in-flight work
	// may finish after SIGTERM before it is requeued. Default 25s, inside a
	// Procfile host's 30s grace.
	ShutdownTimeout time.Duration
	// AllowedCIDRs (HOOKLANE_ALLOWED_CIDRS, comma-separated) are the
	// private, loopback or otherwise refused networks the worker may still
	// deliver to. Default none: the SSRF guard refuses them all.
	AllowedCIDRs []netip.Prefix
	// Resolver resolves endpoint host names. Default the system's. The
	// SSRF guard judges the address it returns, whatever it is.
	Resolver *net.Resolver
	// DeadLetterRetention (HOOKLANE_DEAD_LETTER_RETENTION) is how long the
	// dead-letter ledger keeps an entry. Default 0: until it is replayed or
	// deleted.
	DeadLetterRetention time.Duration
	// Shards (HOOKLANE_QUEUE_SHARDS) is the number of delivery queues per
	// lane and region. Default: what the namespace was created with, else
	// 1 (6 on a Redis Cluster). See deploy.EnsureLayout.
	Shards int
	// Regions (HOOKLANE_REGIONS, comma-separated) are the regions whose
	// deliveries this worker claims; "default" names subscribers without a
	// region. Default: every region (and new ones as subscribers name them).
	Regions []string
	// RegionCheck is how often a worker serving every region looks for
	// regions to serve and regions to let go (regions.go). Default 10s.
	RegionCheck time.Duration
	// Breaker is every destination's circuit breaker (see
	// limits.BreakerPolicy): HOOKLANE_BREAKER_FAILURES (default 5 in a
	// row), HOOKLANE_BREAKER_PROBE_GAP (1s), HOOKLANE_BREAKER_MAX_PROBE_GAP
	// (5m), HOOKLANE_BREAKER_RAMP (10s), HOOKLANE_DISABLE_AFTER (24h; 0:
	// never).
	Breaker limits.BreakerPolicy
	// DeadReportEvery (HOOKLANE_DEAD_REPORT_EVERY) is the least time
	// between two hooklane.delivery.dead operator events of one
	// subscriber. Default 1m.
	DeadReportEvery time.Duration
	// DedupWindow (HOOKLANE_DEDUP_WINDOW) is how long a delivery record
	// (state and attempts, and the marker that makes a re-publish a
	// duplicate) is kept after its delivery ends. Default 24h. The web
	// process and every worker should agree.
	DedupWindow time.Duration
	// PayloadRetention (HOOKLANE_PAYLOAD_RETENTION) is how long the
	// operator events this worker publishes keep their payload for a
	// resend (producer.Config.PayloadRetention). Default 24h.
	PayloadRetention time.Duration
	// ResponseBody (HOOKLANE_RESPONSE_BODY_BYTES) is how much of each
	// response's body an attempt keeps in the delivery record. Default
	// 1024; NoResponseBody (the variable set to 0): none.
	ResponseBody int
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// gone are the settings of goneVars FromEnv found set: New warns of
	// each, with the Logger set after FromEnv.
	gone []goneVar
}

// goneVar is a setting of a release before that no longer means anything.
type goneVar struct{ name, why string }

// goneVars are the settings that are gone. A worker started with one logs
// a warning naming it, so that nobody believes it works, and starts: an
// upgrade does not stop a deploy that still sets it.
var goneVars = []goneVar{
	{"HOOKLANE_PAUSE_RECHECK", "a paused subscriber's events are held until it is resumed, never looked at again meanwhile"},
}

// DefaultBatchMax is Config.BatchMax's default (deploy/BENCHMARKS.md,
// "Batches").
const DefaultBatchMax = 16

// NoResponseBody as Config.ResponseBody keeps no response body.
const NoResponseBody = -1

// NoWait as Config.MaxWait: no in-handler wait at all; every wait is a
// deferral.
const NoWait time.Duration = -1

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.RedisConfig = c.RedisConfig.WithDefaults()
	c.Namespace = cmp.Or(c.Namespace, "hooklane")
	c.Concurrency = cmp.Or(c.Concurrency, 200)
	c.DequeueLoops = cmp.Or(c.DequeueLoops, 8)
	c.MaxWaiters = cmp.Or(c.MaxWaiters, max(c.Concurrency/4, 1))
	c.MaxWaiting = cmp.Or(c.MaxWaiting, max(c.Concurrency/2, 1))
	c.MaxWait = cmp.Or(c.MaxWait, time.Second)
	c.BatchMax = cmp.Or(c.BatchMax, DefaultBatchMax)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, 5*time.Second)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 15*time.Second)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, time.Hour)
	c.BackoffBase = cmp.Or(c.BackoffBase, 2*time.Second)
	c.BackoffMax = cmp.Or(c.BackoffMax, 10*time.Minute)
	c.PollInterval = cmp.Or(c.PollInterval, 500*time.Millisecond)
	c.RegionCheck = cmp.Or(c.RegionCheck, 10*time.Second)
	c.RescueInterval = cmp.Or(c.RescueInterval, 10*time.Second)
	c.RescueSweep = cmp.Or(c.RescueSweep, 5*time.Minute)
	c.ForwardInterval = cmp.Or(c.ForwardInterval, time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 25*time.Second)
	c.DedupWindow = cmp.Or(c.DedupWindow, 24*time.Hour)
	c.PayloadRetention = cmp.Or(c.PayloadRetention, 24*time.Hour)
	c.ResponseBody = cmp.Or(c.ResponseBody, 1024)
	c.Breaker = c.Breaker.WithDefaults()
	c.DeadReportEvery = cmp.Or(c.DeadReportEvery, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	atLeast := func(name string, v, least int) {
		if v < least {
			errs = append(errs, fmt.Errorf("worker: %s must be at least %d, not %d", name, least, v))
		}
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("worker: %s must be positive, not %v", name, d))
		}
	}
	if c.Redis == nil {
		if err := c.RedisConfig.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("worker: %w", err))
		}
	}
	if err := tasks.ValidateNamespace(c.Namespace); err != nil {
		errs = append(errs, fmt.Errorf("worker: Namespace (HOOKLANE_NAMESPACE): %w", err))
	}
	atLeast("Concurrency (HOOKLANE_CONCURRENCY)", c.Concurrency, 1)
	atLeast("DequeueLoops (HOOKLANE_DEQUEUE_LOOPS)", c.DequeueLoops, 1)
	atLeast("MaxWaiters (HOOKLANE_MAX_WAITERS)", c.MaxWaiters, 1)
	atLeast("MaxWaiting (HOOKLANE_MAX_WAITING)", c.MaxWaiting, 1)
	atLeast("BatchMax (HOOKLANE_BATCH_MAX)", c.BatchMax, 1)
	if c.BatchMax > tasks.MaxBatch {
		errs = append(errs, fmt.Errorf("worker: BatchMax (HOOKLANE_BATCH_MAX) must be at most %d, not %d", tasks.MaxBatch, c.BatchMax))
	}
	positive("ConnectTimeout (HOOKLANE_CONNECT_TIMEOUT)", c.ConnectTimeout)
	positive("RequestTimeout (HOOKLANE_REQUEST_TIMEOUT)", c.RequestTimeout)
	positive("BackoffBase (HOOKLANE_BACKOFF_BASE)", c.BackoffBase)
	positive("BackoffMax (HOOKLANE_BACKOFF_MAX)", c.BackoffMax)
	positive("PollInterval (HOOKLANE_POLL_INTERVAL)", c.PollInterval)
	positive("RescueInterval (HOOKLANE_RESCUE_INTERVAL)", c.RescueInterval)
	positive("RescueSweep (HOOKLANE_RESCUE_SWEEP)", c.RescueSweep)
	positive("RegionCheck", c.RegionCheck)
	positive("ForwardInterval (HOOKLANE_FORWARD_INTERVAL)", c.ForwardInterval)
	positive("ShutdownTimeout (HOOKLANE_SHUTDOWN_TIMEOUT)", c.ShutdownTimeout)
	positive("DeadReportEvery (HOOKLANE_DEAD_REPORT_EVERY)", c.DeadReportEvery)
	positive("DedupWindow (HOOKLANE_DEDUP_WINDOW)", c.DedupWindow)
	positive("PayloadRetention (HOOKLANE_PAYLOAD_RETENTION)", c.PayloadRetention)
	switch {
	case c.MaxWait != NoWait && (c.MaxWait < 0 || c.MaxWait > 10*time.Second):
		errs = append(errs, errors.New("worker: MaxWait (HOOKLANE_MAX_WAIT) must be between 0 (no wait) and 10s"))
	case c.RequestTimeout < c.ConnectTimeout:
		errs = append(errs, errors.New("worker: RequestTimeout must not be shorter than ConnectTimeout"))
	case c.BackoffMax < c.BackoffBase:
		errs = append(errs, errors.New("worker: BackoffMax must not be shorter than BackoffBase"))
	case c.DeadLetterRetention < 0:
		errs = append(errs, errors.New("worker: DeadLetterRetention (HOOKLANE_DEAD_LETTER_RETENTION) must not be negative (0: keep)"))
	case c.MaxRetryAfter < time.Second:
		errs = append(errs, errors.New("worker: MaxRetryAfter (HOOKLANE_MAX_RETRY_AFTER) must be at least 1s"))
	case c.ResponseBody != NoResponseBody && (c.ResponseBody < 0 || c.ResponseBody > maxResponseBody):
		errs = append(errs, fmt.Errorf("worker: ResponseBody (HOOKLANE_RESPONSE_BODY_BYTES) must be between 0 (none) and %d", maxResponseBody))
	case c.Shards < 0 || c.Shards > 256:
		errs = append(errs, errors.New("worker: Shards (HOOKLANE_QUEUE_SHARDS) must be 0 (the namespace's) or 1-256"))
	}
	if err := c.Breaker.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("worker: %w", err))
	}
	for _, r := range c.Regions {
		if r != tasks.DefaultRegion && tasks.ValidateRegion(r) != nil {
			errs = append(errs, fmt.Errorf("worker: Regions (HOOKLANE_REGIONS): %q: want a-z 0-9 - (1-32), or %q", r, tasks.DefaultRegion))
		}
	}
	return errors.Join(errs...)
}

// warnGone logs each gone setting the environment sets.
func (c Config) warnGone() {
	for _, g := range c.gone {
		c.Logger.Warn("a setting of a release before is set; it is ignored: unset it", "setting", g.name, "why", g.why)
	}
}

// maxWait is MaxWait as a duration (NoWait: 0).
func (c Config) maxWait() time.Duration { return max(c.MaxWait, 0) }

// FromEnv reads a Config from the environment; unset variables stay zero
// (WithDefaults fills them). Errors name the variable.
func FromEnv() (Config, error) {
	c := Config{Namespace: os.Getenv("HOOKLANE_NAMESPACE")}
	var errs []error
	var err error
	if c.RedisConfig, err = deploy.RedisFromEnv(os.Getenv); err != nil {
		errs = append(errs, err)
	}
	// A variable that is set must say what it means: zero is refused (it
	// would silently become the default) except where it has a meaning of
	// its own.
	intVar := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %q is not a whole number", name, v))
			case n < 1:
				errs = append(errs, fmt.Errorf("%s: must be at least 1, not %d", name, n))
			}
			*dst = n
		}
	}
	durVar := func(name string, dst *time.Duration, zero time.Duration, zeroOK bool) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %q is not a duration such as 500ms or 2s", name, v))
			case d < 0:
				errs = append(errs, fmt.Errorf("%s: must not be negative, not %s", name, v))
			case d == 0 && !zeroOK:
				errs = append(errs, fmt.Errorf("%s: must be positive, not %s", name, v))
			case d == 0:
				d = zero
			}
			*dst = d
		}
	}
	intVar("HOOKLANE_CONCURRENCY", &c.Concurrency)
	intVar("HOOKLANE_DEQUEUE_LOOPS", &c.DequeueLoops)
	intVar("HOOKLANE_MAX_WAITERS", &c.MaxWaiters)
	intVar("HOOKLANE_MAX_WAITING", &c.MaxWaiting)
	intVar("HOOKLANE_BATCH_MAX", &c.BatchMax)
	if v := os.Getenv("HOOKLANE_TENANT_FRESH_RATE"); v != "" {
		n, err := producer.ParseTenantFreshRate(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("HOOKLANE_TENANT_FRESH_RATE: %w", err))
		}
		c.TenantFreshRate = n
	}
	durVar("HOOKLANE_MAX_WAIT", &c.MaxWait, NoWait, true) // 0: no in-handler wait
	durVar("HOOKLANE_CONNECT_TIMEOUT", &c.ConnectTimeout, 0, false)
	durVar("HOOKLANE_REQUEST_TIMEOUT", &c.RequestTimeout, 0, false)
	durVar("HOOKLANE_MAX_RETRY_AFTER", &c.MaxRetryAfter, 0, false)
	durVar("HOOKLANE_BACKOFF_BASE", &c.BackoffBase, 0, false)
	durVar("HOOKLANE_BACKOFF_MAX", &c.BackoffMax, 0, false)
	for _, g := range goneVars {
		if os.Getenv(g.name) != "" {
			c.gone = append(c.gone, g)
		}
	}
	durVar("HOOKLANE_POLL_INTERVAL", &c.PollInterval, 0, false)
	durVar("HOOKLANE_RESCUE_INTERVAL", &c.RescueInterval, 0, false)
	durVar("HOOKLANE_RESCUE_SWEEP", &c.RescueSweep, 0, false)
	durVar("HOOKLANE_FORWARD_INTERVAL", &c.ForwardInterval, 0, false)
	durVar("HOOKLANE_SHUTDOWN_TIMEOUT", &c.ShutdownTimeout, 0, false)
	durVar("HOOKLANE_DEAD_LETTER_RETENTION", &c.DeadLetterRetention, 0, true) // 0: keep
	intVar("HOOKLANE_QUEUE_SHARDS", &c.Shards)
	intVar("HOOKLANE_BREAKER_FAILURES", &c.Breaker.Failures)
	durVar("HOOKLANE_BREAKER_PROBE_GAP", &c.Breaker.ProbeGap, 0, false)
	durVar("HOOKLANE_BREAKER_MAX_PROBE_GAP", &c.Breaker.MaxProbeGap, 0, false)
	durVar("HOOKLANE_BREAKER_RAMP", &c.Breaker.Ramp, 0, false)
	durVar("HOOKLANE_DISABLE_AFTER", &c.Breaker.DisableAfter, -1, true) // 0: never
	durVar("HOOKLANE_DEAD_REPORT_EVERY", &c.DeadReportEvery, 0, false)
	durVar("HOOKLANE_DEDUP_WINDOW", &c.DedupWindow, 0, false)
	durVar("HOOKLANE_PAYLOAD_RETENTION", &c.PayloadRetention, 0, false)
	if v := os.Getenv("HOOKLANE_RESPONSE_BODY_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < 0:
			errs = append(errs, fmt.Errorf("HOOKLANE_RESPONSE_BODY_BYTES: %q is not a byte count (0: none)", v))
		case n == 0:
			c.ResponseBody = NoResponseBody
		default:
			c.ResponseBody = n
		}
	}
	if v := os.Getenv("HOOKLANE_REGIONS"); v != "" {
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				c.Regions = append(c.Regions, r)
			}
		}
		if len(c.Regions) == 0 {
			errs = append(errs, errors.New("HOOKLANE_REGIONS: names no region"))
		}
	}
	if v := os.Getenv("HOOKLANE_ALLOWED_CIDRS"); v != "" {
		var err error
		if c.AllowedCIDRs, err = tasks.ParseCIDRs(v); err != nil {
			errs = append(errs, fmt.Errorf("HOOKLANE_ALLOWED_CIDRS: %w", err))
		}
	}
	return c, errors.Join(errs...)
}
