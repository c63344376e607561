package producer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
	"github.com/hooklane/hooklane/limits"
	"github.com/hooklane/hooklane/tasks"
)

var (
	// ErrInvalid wraps every validation error; the message names the field.
	ErrInvalid = tasks.ErrInvalid
	// ErrUnknownSubscriber: no subscriber has that id.
	ErrUnknownSubscriber = errors.New("unknown subscriber")
	// ErrPayloadTooLarge: the event's data is over Config.MaxDataSize.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrUnknownDeadLetter: no dead letter has that task id.
	ErrUnknownDeadLetter = errors.New("unknown dead letter")
	// ErrUnknownTenant: no tenant has that name (or it is being deleted).
	ErrUnknownTenant = errors.New("unknown tenant")
	// ErrTenantDeleting: a PutTenant of a tenant whose deletion is under
	// way or was cut off; DeleteTenant finishes it.
	ErrTenantDeleting = errors.New("tenant being deleted")
	// ErrRedisUnavailable: Redis could not be reached or failed the command.
	// Nothing was written by the call that returned it, except deliveries
	// its PublishResult lists as enqueued.
	ErrRedisUnavailable = errors.New("redis unavailable")
	// ErrNotReplicated: with Config.WaitReplicas, the master took the
	// target's task but not enough replicas acknowledged it in time: it may
	// be delivered, or lost if the master dies now. Publish again.
	ErrNotReplicated = errors.New("not replicated")
	// ErrUnknownDelivery: no delivery record of that event to that
	// subscriber (never published to it, or past the dedup window).
	ErrUnknownDelivery = errors.New("unknown delivery")
	// ErrUnknownEvent: no event of that id is kept (never published, or
	// past the payload retention).
	ErrUnknownEvent = errors.New("unknown event")
	// ErrPayloadExpired: a resend of an event whose payload is past its
	// retention: there is nothing left to send.
	ErrPayloadExpired = errors.New("payload expired")
	// ErrDeliveryActive: a resend of a delivery that is still under way.
	ErrDeliveryActive = errors.New("delivery still under way")
	// ErrEventConflict: an event id published again with another type or
	// other data than the event stored under it. Nothing was written: an
	// id names one event, so that no subscriber is ever sent another
	// event's body.
	ErrEventConflict = errors.New("event id conflict")
	// ErrSubscriberRecreated: a replay or resend of a dead letter whose
	// subscriber was deleted and created again since: the old event is
	// not sent to the new endpoint. Nothing was written.
	ErrSubscriberRecreated = errors.New("subscriber created again since")
)

// Config configures a Producer. Zero fields take the defaults named.
type Config struct {
	// RedisConfig says which Redis to use when Redis is nil: one server, a
	// Cluster or Sentinel (deploy.RedisFromEnv reads it from the variables
	// the worker reads). Default one server at redis://127.0.0.1:6379/0.
	RedisConfig deploy.RedisConfig
	// Redis, if set, is used as is and not closed by Close; RedisConfig is
	// then ignored.
	Redis redis.UniversalClient
	// Namespace prefixes hooklane's Redis keys and names the asynq queue.
	// Default "hooklane". A worker must use the same one.
	Namespace string
	// DedupWindow is how long a delivered event's id stays reserved, so a
	// re-publish is a duplicate, and how long its delivery record (state
	// and attempts) is kept after its delivery ends. Default 24h.
	DedupWindow time.Duration
	// PayloadRetention is how long an event's payload is kept, once
	// whatever its number of subscribers, for GET /v1/events/{id} and
	// resends. Default 24h.
	PayloadRetention time.Duration
	// MaxAttempts is the default number of counted attempts before an event
	// is dead-lettered. Default 8.
	MaxAttempts int
	// RetryHorizon is the default time after publishing past which an event
	// is dead-lettered instead of rescheduled. Default 24h.
	RetryHorizon time.Duration
	// MaxDataSize caps an event's data. Default 256 KiB.
	MaxDataSize int
	// MaxNotBefore (HOOKLANE_MAX_NOT_BEFORE) is the furthest ahead a
	// publish's not-before time may be: everything a delivery keeps lives
	// from its due time on, so this bounds how long an event and its
	// records are kept. Default 7 days; at most 365 days.
	MaxNotBefore time.Duration
	// Shards (HOOKLANE_QUEUE_SHARDS) is the number of delivery queues per
	// lane and region. Default: what the namespace was created with, else
	// 1 (6 on a Redis Cluster). Workers must agree: see deploy.EnsureLayout.
	Shards int
	// MaxWait is the workers' MaxWait (HOOKLANE_MAX_WAIT): the longest a
	// delivery waits in a worker for its in-flight or rate slot. A publish
	// hands a delivery straight to asynq (skipping the lot) only when it can
	// go within it, so give the web processes the workers' value: sized for
	// a longer wait, the worker parks what a publish handed it. Default 1s
	// (limits.DefaultMaxWait); negative (HOOKLANE_MAX_WAIT=0): no wait.
	MaxWait time.Duration
	// FreshMax is how many of one subscriber's tasks may wait in the fresh
	// lane at once; while that many do, its new ones go to the backlog
	// lane, so that a subscriber that publishes a flood does not hold up
	// the others' events. Default 100.
	FreshMax int
	// TenantFreshRate is how many of one registered tenant's deliveries a
	// second its publishes may put in the fresh lane; past it, for the
	// rest of that second, they go to the backlog lane, so that a tenant
	// publishing a flood across many subscribers does not hold up another
	// tenant's events (the default tenant's keep the lanes as before).
	// Default 200; negative: no cap.
	TenantFreshRate int
	// BatchAfter is how many of one subscriber's deliveries may wait in
	// asynq for a worker as tasks of their own before its new events join
	// its lot, whence the workers' turns hand them out in batches
	// (worker.Config.BatchMax a task): an idle subscriber's event goes at
	// once, alone; a backlogged one's travel batched. While no worker
	// serves the subscriber's region, 1 (serving.go). Default 64; negative:
	// no cap (every event that can go at once goes as its own task).
	BatchAfter int
	// WaitReplicas, when positive, makes a publish (Publish, SendTo, Replay)
	// report a target enqueued or a duplicate only once that many replicas
	// of the master hold every write of the call (Redis WAIT), so that the
	// publish survives the master's death and a Sentinel failover to such a
	// replica; a target whose writes they did not acknowledge within
	// WaitTimeout is reported failed with ErrNotReplicated (publishing again
	// is safe). Without it a publish acknowledged just before the master dies
	// can be lost (asynchronous replication; see deploy/GUARANTEES.md). Not on a Redis
	// Cluster: a publish writes to several masters there. Default 0: no wait.
	WaitReplicas int
	// WaitTimeout is the longest a publish waits for WaitReplicas. It must
	// stay below the client's read timeout (go-redis: 3s). Default 1s.
	WaitTimeout time.Duration
	// AllowedCIDRs (HOOKLANE_ALLOWED_CIDRS, comma-separated) are the
	// addresses a subscriber URL may name literally although the worker's
	// SSRF guard refuses their kind (loopback, private, link-local…): give
	// the web processes the worker's list. A URL naming a refused address is
	// refused when it is written (ErrInvalid naming url); host names are
	// checked by the worker, on what they resolve to, at delivery.
	AllowedCIDRs []netip.Prefix
	// MaxRegions (HOOKLANE_MAX_REGIONS) is how many regions a namespace's
	// subscribers may name, the default region included: every region costs
	// each worker serving all regions its Servers (deploy/CONFIGURATION.md).
	// A subscriber naming one more is refused (ErrInvalid naming region).
	// Default 8.
	MaxRegions int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.RedisConfig = c.RedisConfig.WithDefaults()
	c.Namespace = cmp.Or(c.Namespace, "hooklane")
	c.DedupWindow = cmp.Or(c.DedupWindow, 24*time.Hour)
	c.PayloadRetention = cmp.Or(c.PayloadRetention, 24*time.Hour)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 8)
	c.RetryHorizon = cmp.Or(c.RetryHorizon, 24*time.Hour)
	c.MaxDataSize = cmp.Or(c.MaxDataSize, tasks.MaxDataSize)
	c.MaxNotBefore = cmp.Or(c.MaxNotBefore, DefaultMaxNotBefore)
	c.FreshMax = cmp.Or(c.FreshMax, 100)
	c.TenantFreshRate = cmp.Or(c.TenantFreshRate, DefaultTenantFreshRate)
	c.BatchAfter = cmp.Or(c.BatchAfter, DefaultBatchAfter)
	c.MaxWait = cmp.Or(c.MaxWait, limits.DefaultMaxWait)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, time.Second)
	c.MaxRegions = cmp.Or(c.MaxRegions, DefaultMaxRegions)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Redis == nil {
		if err := c.RedisConfig.Validate(); err != nil {
			return fmt.Errorf("producer: %w", err)
		}
	}
	if err := tasks.ValidateNamespace(c.Namespace); err != nil {
		return fmt.Errorf("producer: Namespace: %w", err)
	}
	switch {
	case c.DedupWindow < 0:
		return errors.New("producer: DedupWindow must not be negative")
	case c.PayloadRetention < 0:
		return errors.New("producer: PayloadRetention must not be negative")
	case c.MaxAttempts < 1:
		return errors.New("producer: MaxAttempts must be at least 1")
	case c.RetryHorizon < time.Second:
		return errors.New("producer: RetryHorizon must be at least 1s")
	case c.MaxDataSize < 1:
		return errors.New("producer: MaxDataSize must be positive")
	case c.MaxNotBefore < time.Minute || c.MaxNotBefore > 365*24*time.Hour:
		return errors.New("producer: MaxNotBefore must be between 1m and 8760h (365 days)")
	case c.Shards < 0 || c.Shards > 256:
		return errors.New("producer: Shards must be 0 (the namespace's) or 1-256")
	case c.FreshMax < 1:
		return errors.New("producer: FreshMax must be positive")
	case c.MaxRegions < 1 || c.MaxRegions > 64:
		return errors.New("producer: MaxRegions must be 1-64")
	case c.WaitReplicas < 0:
		return errors.New("producer: WaitReplicas must not be negative")
	case c.WaitTimeout < time.Millisecond:
		return errors.New("producer: WaitTimeout must be at least 1ms (Redis' WAIT 0 waits forever)")
	}
	if c.WaitReplicas > 0 {
		_, cluster := c.Redis.(*redis.ClusterClient)
		if cluster || (c.Redis == nil && c.RedisConfig.IsCluster()) {
			return errors.New("producer: WaitReplicas is not for a Redis Cluster, where a publish writes to several masters")
		}
		if rc, ok := c.Redis.(*redis.Client); ok && rc.Options().ReadTimeout > 0 && c.WaitTimeout >= rc.Options().ReadTimeout {
			return fmt.Errorf("producer: WaitTimeout %v must be below the client's ReadTimeout %v", c.WaitTimeout, rc.Options().ReadTimeout)
		}
	}
	return nil
}

// DefaultMaxNotBefore is Config.MaxNotBefore's default.
const DefaultMaxNotBefore = 7 * 24 * time.Hour

// DefaultMaxRegions is Config.MaxRegions' default.
const DefaultMaxRegions = 8

// DefaultTenantFreshRate is Config.TenantFreshRate's default.
const DefaultTenantFreshRate = 200

// TenantFreshRate is the Config.TenantFreshRate p runs with (0: no cap).
func (p *Producer) TenantFreshRate() int { return max(p.cfg.TenantFreshRate, 0) }

// ParseTenantFreshRate reads a TenantFreshRate setting as
// HOOKLANE_TENANT_FRESH_RATE gives it: a whole number from 0 (no cap: -1
// in Config) to 1,000,000.
func ParseTenantFreshRate(v string) (int, error) {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 0 || n > 1_000_000:
		return 0, fmt.Errorf("want a whole number from 0 (no cap) to 1000000 deliveries a second, got %q", v)
	case n == 0:
		return -1, nil
	}
	return n, nil
}

// DefaultBatchAfter is Config.BatchAfter's default.
const DefaultBatchAfter = 64

// ParseBatchAfter reads a BatchAfter setting as HOOKLANE_BATCH_AFTER gives
// it: a whole number from 0 (no cap: -1 in Config) to 10,000.
func ParseBatchAfter(v string) (int, error) {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 0 || n > 10000:
		return 0, errors.New("want a whole number from 0 (no cap) to 10000")
	case n == 0:
		return -1, nil
	}
	return n, nil
}

// Producer registers subscribers and publishes events. It is safe for
// concurrent use.
type Producer struct {
	cfg       Config
	rdb       redis.UniversalClient
	ownRDB    bool
	client    *asynq.Client
	inspector *asynq.Inspector // frees a replayed dead letter's archived task
	gates     *limits.Gates
	keys      tasks.Keys
	nowFunc   func() time.Time
	// tenant is whose subscribers, events, deliveries and dead letters
	// this Producer sees (Tenant); "" the default tenant's.
	tenant string
	layout *layout // shared by a Producer and its tenants' (Tenant)
	served *served // likewise
}

// layout is the namespace's layout, read from Redis on first use.
type layout struct {
	mu sync.Mutex
	l  deploy.Layout
}

// shards is the namespace's queue count per lane and region, read (or
// written) once.
func (p *Producer) shards(ctx context.Context) (int, error) {
	p.layout.mu.Lock()
	defer p.layout.mu.Unlock()
	if p.layout.l.Shards == 0 {
		l, err := deploy.EnsureLayout(ctx, p.rdb, p.keys, p.cfg.Shards)
		if errors.Is(err, deploy.ErrLayout) {
			return 0, err
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		p.layout.l = l
	}
	return p.layout.l.Shards, nil
}

// New connects a Producer. It does not contact Redis until first used.
func New(cfg *Config) (*Producer, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Producer{cfg: c, rdb: c.Redis, keys: tasks.Keys(c.Namespace), nowFunc: time.Now, layout: &layout{},
		served: &served{m: map[string]servedSeen{}}}
	if p.rdb == nil {
		// An app publishing while Redis is down wants to hear so at once,
		// not after go-redis's default 5 dials times 3 retries.
		rdb, err := c.RedisConfig.NewClient(deploy.ClientTuning{DialerRetries: 1, MaxRetries: 1})
		if err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
		p.rdb, p.ownRDB = rdb, true
	}
	p.client = asynq.NewClientFromRedisClient(p.rdb)
	p.inspector = asynq.NewInspectorFromRedisClient(p.rdb)
	p.gates = limits.NewGates(p.rdb)
	return p, nil
}

// Close releases the Redis connection if the Producer opened it.
func (p *Producer) Close() error {
	if p.ownRDB {
		return p.rdb.Close()
	}
	return nil
}
