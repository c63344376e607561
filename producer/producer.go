package producer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
	// Shards (HOOKLANE_QUEUE_SHARDS) is the number of delivery queues per
	// lane and region. Default: what the namespace was created with, else
	// 1 (6 on a Redis Cluster). Workers must agree: see deploy.EnsureLayout.
	Shards int
	// FreshMax is how many of one subscriber's tasks may wait in the fresh
	// lane at once; while that many do, its new ones go to the backlog
	// lane, so that a subscriber that publishes a flood does not hold up
	// the others' events. Default 100.
	FreshMax int
	// WaitReplicas, when positive, makes a publish (Publish, SendTo, Replay)
	// report a target enqueued or a duplicate only once that many replicas
	// of the master hold every write of the call (Redis WAIT), so that the
	// publish survives the master's death and a Sentinel failover to such a
	// replica; a target whose writes they did not acknowledge within
	// WaitTimeout is reported failed with ErrNotReplicated (publishing again
	// is safe). Without it a publish acknowledged just before the master dies
	// can be lost (asynchronous replication; see the README). Not on a Redis
	// Cluster: a publish writes to several masters there. Default 0: no wait.
	WaitReplicas int
	// WaitTimeout is the longest a publish waits for WaitReplicas. It must
	// stay below the client's read timeout (go-redis: 3s). Default 1s.
	WaitTimeout time.Duration
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
	c.FreshMax = cmp.Or(c.FreshMax, 100)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, time.Second)
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
	case c.Shards < 0 || c.Shards > 256:
		return errors.New("producer: Shards must be 0 (the namespace's) or 1-256")
	case c.FreshMax < 1:
		return errors.New("producer: FreshMax must be positive")
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

// Producer registers subscribers and publishes events. It is safe for
// concurrent use.
type Producer struct {
	cfg       Config
	rdb       redis.UniversalClient
	ownRDB    bool
	client    *asynq.Client
	inspector *asynq.Inspector
	gates     *limits.Gates
	keys      tasks.Keys
	nowFunc   func() time.Time

	layoutMu sync.Mutex
	layout   deploy.Layout // read from Redis on first use
}

// shards is the namespace's queue count per lane and region, read (or
// written) once.
func (p *Producer) shards(ctx context.Context) (int, error) {
	p.layoutMu.Lock()
	defer p.layoutMu.Unlock()
	if p.layout.Shards == 0 {
		l, err := deploy.EnsureLayout(ctx, p.rdb, p.keys, p.cfg.Shards)
		if errors.Is(err, deploy.ErrLayout) {
			return 0, err
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
		p.layout = l
	}
	return p.layout.Shards, nil
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
	p := &Producer{cfg: c, rdb: c.Redis, keys: tasks.Keys(c.Namespace), nowFunc: time.Now}
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

// Outcome is what Publish did for one subscriber.
type Outcome string

const (
	Enqueued  Outcome = "enqueued"
	Duplicate Outcome = "duplicate" // the task id already existed: nothing new will be sent
	Failed    Outcome = "failed"    // see Target.Err; publishing again is safe
	// Held: the subscriber is paused; the event is queued and waits until
	// it is resumed (or dead-letters at its retry horizon).
	Held Outcome = "held"
	// Skipped: the subscriber is paused and PublishOpts.SkipPaused asked
	// to leave it out: nothing was queued for it.
	Skipped Outcome = "skipped"
)

// Target is one subscriber's part of a publish.
type Target struct {
	SubscriberID string    `json:"subscriber_id"`
	TaskID       string    `json:"task_id"`
	Outcome      Outcome   `json:"outcome"`
	ProcessAt    time.Time `json:"process_at,omitzero"` // when the task becomes due, if not at once
	Err          error     `json:"-"`
}

// PublishResult lists each matching subscriber's outcome.
type PublishResult struct {
	EventID string   `json:"event_id"`
	Targets []Target `json:"targets"`
}

// PublishOpts are per-call options; nil means none.
type PublishOpts struct {
	// NotBefore delays delivery: no request is sent before it.
	NotBefore time.Time
	// SkipPaused leaves paused subscribers out (reported Skipped) instead
	// of holding the event for them until they are resumed (Held, the
	// default): an explicit choice to drop their events.
	SkipPaused bool
}

// Publish delivers ev to every subscriber whose filter matches its type. A
// paused subscriber's event is held (queued, waiting until it is resumed)
// unless opts.SkipPaused. A zero ev.Timestamp becomes the publish time. Its cost
// grows with the number of matching subscribers, not with how many there
// are: the directory indexes them by event type.
//
// The returned error is nil only when every target is enqueued or a
// duplicate; otherwise it joins the targets' errors, and the result still
// says what happened to each. Calling Publish again with the same event is
// safe: what was enqueued is reported as a duplicate.
func (p *Producer) Publish(ctx context.Context, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "types starting with " + tasks.OperatorPrefix + " are hooklane's own events"}
	}
	return p.publish(ctx, ev, opts)
}

// PublishOperatorEvent publishes one of hooklane's own events (a type
// starting with tasks.OperatorPrefix) to the subscribers that name it: the
// worker reports breakers and dead letters this way.
func (p *Producer) PublishOperatorEvent(ctx context.Context, ev tasks.Event) (*PublishResult, error) {
	if !tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "an operator event's type starts with " + tasks.OperatorPrefix}
	}
	return p.publish(ctx, ev, nil)
}

func (p *Producer) publish(ctx context.Context, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if err := p.checkEvent(&ev); err != nil {
		return nil, err
	}
	subs, err := p.matching(ctx, ev.Type)
	if err != nil {
		return nil, err
	}
	return p.fanOut(ctx, ev, opts, subs, opts == nil || !opts.SkipPaused)
}

// SendTo delivers ev to one subscriber, whatever its event filter. A paused
// subscriber's event is held until it is resumed, unless opts.SkipPaused.
func (p *Producer) SendTo(ctx context.Context, subscriberID string, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "types starting with " + tasks.OperatorPrefix + " are hooklane's own events"}
	}
	return p.sendTo(ctx, subscriberID, ev, opts)
}

// SendOperatorEventTo sends one of hooklane's own events (hooklane.ping:
// the API's test endpoint) to one subscriber, whatever its filter.
func (p *Producer) SendOperatorEventTo(ctx context.Context, subscriberID string, ev tasks.Event) (*PublishResult, error) {
	if !tasks.IsOperatorType(ev.Type) {
		return nil, &tasks.FieldError{Field: "type", Msg: "an operator event's type starts with " + tasks.OperatorPrefix}
	}
	return p.sendTo(ctx, subscriberID, ev, nil)
}

func (p *Producer) sendTo(ctx context.Context, subscriberID string, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if err := p.checkEvent(&ev); err != nil {
		return nil, err
	}
	s, err := p.GetSubscriber(ctx, subscriberID)
	if err != nil {
		return nil, err
	}
	return p.fanOut(ctx, ev, opts, []tasks.Subscriber{s}, opts == nil || !opts.SkipPaused)
}

func (p *Producer) checkEvent(ev *tasks.Event) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	if len(ev.Data) > p.cfg.MaxDataSize {
		return fmt.Errorf("%w: data is %d bytes, limit %d", ErrPayloadTooLarge, len(ev.Data), p.cfg.MaxDataSize)
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = p.nowFunc().UTC().Truncate(time.Second)
	}
	return nil
}

// KEYS: the index sets an event type is looked up in, then the
// configurations hash (all in slot {<ns>:subs}). Reply: the configurations
// of the subscribers in any of the sets.
var matchScript = redis.NewScript(`
local ids = redis.call('SUNION', unpack(KEYS, 1, #KEYS - 1))
if #ids == 0 then return {} end
local out = {}
for _, v in ipairs(redis.call('HMGET', KEYS[#KEYS], unpack(ids))) do
  if v then out[#out + 1] = v end
end
return out`)

// matching returns the subscribers whose filter matches type t, by id.
func (p *Producer) matching(ctx context.Context, t string) ([]tasks.Subscriber, error) {
	keys := append(p.keys.IndexKeysFor(t), p.keys.SubscriberConfigs())
	vals, err := matchScript.Run(ctx, p.rdb, keys).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	subs := make([]tasks.Subscriber, 0, len(vals))
	for _, v := range vals {
		var s tasks.Subscriber
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			p.cfg.Logger.Error("skipping unreadable subscriber", "err", err)
			continue
		}
		if s.Matches(t) { // the index is exact; this is belt and braces
			subs = append(subs, s)
		}
	}
	slices.SortFunc(subs, func(a, b tasks.Subscriber) int { return strings.Compare(a.ID, b.ID) })
	return subs, nil
}

// PacingLead is how long before its pacing slot a paced task becomes due
// (worker.pacingLead is the same for tasks it defers).
const PacingLead = 500 * time.Millisecond

// fanOut enqueues ev for subs. held queues a paused subscriber's event (it
// waits until resumed); otherwise a paused subscriber is left out, reported
// Skipped.
func (p *Producer) fanOut(ctx context.Context, ev tasks.Event, opts *PublishOpts, subs []tasks.Subscriber, held bool) (*PublishResult, error) {
	return p.fanOutAs(ctx, ev, opts, subs, held, false)
}

// fanOutResend books ev for s again (Resend, Replay), with the same id.
func (p *Producer) fanOutResend(ctx context.Context, ev tasks.Event, s tasks.Subscriber) (*PublishResult, error) {
	return p.fanOutAs(ctx, ev, nil, []tasks.Subscriber{s}, true, true)
}

// fanOutAs is fanOut; resend books deliveries booked before again.
func (p *Producer) fanOutAs(ctx context.Context, ev tasks.Event, opts *PublishOpts, subs []tasks.Subscriber, held, resend bool) (*PublishResult, error) {
	now := p.nowFunc()
	var notBefore time.Time
	if opts != nil && opts.NotBefore.After(now) {
		notBefore = opts.NotBefore
	}
	res := &PublishResult{EventID: ev.ID, Targets: []Target{}}
	if len(subs) == 0 {
		return res, nil
	}
	shards, err := p.shards(ctx)
	if err != nil {
		return nil, err
	}
	// Book each new task a wake-up slot on its subscriber's pacing cursor,
	// so that a burst is spread at the subscriber's rate instead of queued
	// all due now, and a queue (fresh or backlog lane); a re-publish books
	// nothing and goes where the first went. One round trip for all.
	bs := make([]limits.Booking, len(subs))
	for i, s := range subs {
		horizon := cmp.Or(time.Duration(s.RetryHorizon), p.cfg.RetryHorizon)
		bs[i] = limits.Booking{Keys: p.keys.Gates(s.ID), Limit: s.Limit, NotBefore: notBefore, EventID: ev.ID, EventType: ev.Type,
			TaskID: tasks.TaskID(s.ID, ev.ID), RecordTTL: horizon + p.cfg.DedupWindow, Held: held, Resend: resend,
			FreshMax:     p.cfg.FreshMax,
			FreshQueue:   p.keys.DeliveryQueue(s.Region, s.ID, tasks.LaneFresh, shards),
			BacklogQueue: p.keys.DeliveryQueue(s.Region, s.ID, tasks.LaneBacklog, shards)}
	}
	booked, err := p.gates.BookWith(ctx, []*limits.Call{p.storeEvent(ev, subs)}, bs...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}

	var errs []error
	for i, s := range subs {
		b := booked[i]
		t := Target{SubscriberID: s.ID, TaskID: tasks.TaskID(s.ID, ev.ID)}
		if b.Paused { // only with SkipPaused: nothing was written
			t.Outcome = Skipped
			res.Targets = append(res.Targets, t)
			continue
		}
		if b.Duplicate && b.Taken {
			// A worker has taken its task: asynq may have forgotten it (it
			// keeps none after delivery), the delivery record has not.
			t.Outcome = Duplicate
			res.Targets = append(res.Targets, t)
			continue
		}
		if b.Unknown {
			t.Outcome = Failed
			t.Err = fmt.Errorf("%w: subscriber %s is being created or deleted; publish again", ErrUnknownSubscriber, s.ID)
			errs = append(errs, t.Err)
			res.Targets = append(res.Targets, t)
			continue
		}
		// asynq keeps schedule times in whole seconds. A not-before time is
		// a promise, so it is rounded up (and the gates check it again, in
		// Redis' clock). A pacing slot is not: the task is due half a second
		// to a second and a half before it, since asynq moves due tasks only
		// every so often, and the worker books the slot and waits for it, so
		// the limit is used in full.
		if b.In >= time.Second {
			t.ProcessAt = now.Add(b.In - PacingLead).Truncate(time.Second)
		}
		if !notBefore.IsZero() && t.ProcessAt.Before(notBefore) {
			t.ProcessAt = limits.CeilSecond(notBefore)
		}
		t.Outcome, t.Err = p.enqueue(ctx, s, ev, b, now, notBefore, t)
		if t.Outcome == Enqueued && b.Held {
			t.Outcome = Held
		}
		if t.Err != nil {
			errs = append(errs, t.Err)
		}
		res.Targets = append(res.Targets, t)
	}
	if err := p.waitReplicas(ctx, res); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// waitReplicas waits, with Config.WaitReplicas, until that many replicas
// hold every write made so far, and marks the targets enqueued or
// duplicate failed with ErrNotReplicated if they do not in time.
//
// WAIT counts the replicas that acknowledged the last write of its own
// connection, and go-redis pools connections: the publish's writes went out
// on others, and a WAIT alone would return at once. So a write goes first
// on the same connection (a pipeline uses one): a PUBLISH, which Redis
// replicates and which stores nothing. The replication stream is one
// ordered log, so a replica that has it has every write acknowledged before.
func (p *Producer) waitReplicas(ctx context.Context, res *PublishResult) error {
	want := p.cfg.WaitReplicas
	if want == 0 || !slices.ContainsFunc(res.Targets, written) {
		return nil
	}
	var wait *redis.Cmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Publish(ctx, p.keys.ReplicationMark(), "")
		// Pipeliner has no Wait: the command as go-redis' Wait sends it.
		wait = pl.Do(ctx, "wait", want, p.cfg.WaitTimeout.Milliseconds())
		return nil
	})
	var acked int64
	if err == nil {
		acked, err = wait.Int64()
	}
	if err == nil && acked >= int64(want) {
		return nil
	}
	if err != nil {
		err = fmt.Errorf("%w: waiting for %d replicas: %v; publish again", ErrNotReplicated, want, err)
	} else {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged within %v; publish again", ErrNotReplicated, acked, want, p.cfg.WaitTimeout)
	}
	for i := range res.Targets {
		if t := &res.Targets[i]; written(*t) {
			t.Outcome, t.Err = Failed, err
		}
	}
	return err
}

// written reports whether the target's publish wrote or found its task.
func written(t Target) bool { return t.Outcome != Failed && t.Outcome != Skipped }

// enqueue writes one task to asynq, in the queue it was booked for.
func (p *Producer) enqueue(ctx context.Context, s tasks.Subscriber, ev tasks.Event, b limits.Booked, now, notBefore time.Time, t Target) (Outcome, error) {
	gen := b.Gen
	ev.Data = nil // stored once for every subscriber (storeEvent): the task refers to it
	d := tasks.Delivery{
		V: tasks.DeliveryVersion, SubscriberID: s.ID, Gen: gen, MaxAttempts: cmp.Or(s.MaxAttempts, p.cfg.MaxAttempts),
		Event: ev, PayloadRef: true, EnqueuedAt: now, NotBefore: notBefore,
		ExpiresAt: now.Add(cmp.Or(time.Duration(s.RetryHorizon), p.cfg.RetryHorizon)),
	}
	opts := []asynq.Option{
		// No Retention: the delivery record is the dedup marker and the
		// log, at a fraction of a kept task's size.
		asynq.TaskID(t.TaskID), asynq.Queue(b.Queue),
		// hooklane counts attempts itself (Delivery.MaxAttempts); see tasks.AsynqMaxRetry.
		asynq.MaxRetry(tasks.AsynqMaxRetry),
	}
	if !t.ProcessAt.IsZero() {
		opts = append(opts, asynq.ProcessAt(t.ProcessAt))
	}
	task, err := tasks.NewDeliverTask(d, opts...)
	if err != nil {
		return Failed, err
	}
	for try := 0; ; try++ {
		_, err = p.client.EnqueueContext(ctx, task)
		switch {
		case err == nil:
			return Enqueued, nil
		case errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
			// The id is taken: by this event, or by a task of a deleted
			// subscriber of the same id, which would be dropped unsent.
			if try > 0 || !p.freeStaleTask(b.Queue, t.TaskID, gen) {
				return Duplicate, nil
			}
		default:
			return Failed, fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, s.ID, err)
		}
	}
}

// freeStaleTask deletes the task with id taskID when it belongs to another
// generation of its subscriber and is not running, and reports whether it
// did.
func (p *Producer) freeStaleTask(queue, taskID, gen string) bool {
	info, err := p.inspector.GetTaskInfo(queue, taskID)
	if err != nil || info.State == asynq.TaskStateActive {
		return false
	}
	var d tasks.Delivery
	if json.Unmarshal(info.Payload, &d) != nil || d.Gen == "" || d.Gen == gen {
		return false
	}
	return p.inspector.DeleteTask(queue, taskID) == nil
}
