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
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

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
)

// Config configures a Producer. Zero fields take the defaults named.
type Config struct {
	// RedisURL is used when Redis is nil. Default redis://127.0.0.1:6379/0.
	RedisURL string
	// Redis, if set, is used as is and not closed by Close.
	Redis redis.UniversalClient
	// Namespace prefixes hooklane's Redis keys and names the asynq queue.
	// Default "hooklane". A worker must use the same one.
	Namespace string
	// DedupWindow is how long a delivered event's id stays reserved, so a
	// re-publish is a duplicate (asynq Retention). Default 24h.
	DedupWindow time.Duration
	// MaxAttempts is the default number of counted attempts before an event
	// is dead-lettered. Default 8.
	MaxAttempts int
	// RetryHorizon is the default time after publishing past which an event
	// is dead-lettered instead of rescheduled. Default 24h.
	RetryHorizon time.Duration
	// MaxDataSize caps an event's data. Default 256 KiB.
	MaxDataSize int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.RedisURL = cmp.Or(c.RedisURL, "redis://127.0.0.1:6379/0")
	c.Namespace = cmp.Or(c.Namespace, "hooklane")
	c.DedupWindow = cmp.Or(c.DedupWindow, 24*time.Hour)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 8)
	c.RetryHorizon = cmp.Or(c.RetryHorizon, 24*time.Hour)
	c.MaxDataSize = cmp.Or(c.MaxDataSize, tasks.MaxDataSize)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.DedupWindow < 0:
		return errors.New("producer: DedupWindow must not be negative")
	case c.MaxAttempts < 1:
		return errors.New("producer: MaxAttempts must be at least 1")
	case c.RetryHorizon < time.Second:
		return errors.New("producer: RetryHorizon must be at least 1s")
	case c.MaxDataSize < 1:
		return errors.New("producer: MaxDataSize must be positive")
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
		opt, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("producer: RedisURL: %w", err)
		}
		// An app publishing while Redis is down wants to hear so at once,
		// not after go-redis's default 5 dials times 3 retries.
		opt.DialerRetries, opt.MaxRetries = 1, 1
		p.rdb, p.ownRDB = redis.NewClient(opt), true
	}
	p.client = asynq.NewClientFromRedisClient(p.rdb)
	p.inspector = asynq.NewInspectorFromRedisClient(p.rdb)
	p.gates = limits.NewGates(p.rdb, c.Namespace)
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
}

// Publish delivers ev to every subscriber whose filter matches its type and
// that is not paused. A zero ev.Timestamp becomes the publish time.
//
// The returned error is nil only when every target is enqueued or a
// duplicate; otherwise it joins the targets' errors, and the result still
// says what happened to each. Calling Publish again with the same event is
// safe: what was enqueued is reported as a duplicate.
func (p *Producer) Publish(ctx context.Context, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if err := p.checkEvent(&ev); err != nil {
		return nil, err
	}
	subs, err := p.ListSubscribers(ctx)
	if err != nil {
		return nil, err
	}
	var targets []tasks.Subscriber
	for _, s := range subs {
		if !s.Paused && s.Matches(ev.Type) {
			targets = append(targets, s)
		}
	}
	slices.SortFunc(targets, func(a, b tasks.Subscriber) int { return strings.Compare(a.ID, b.ID) })
	return p.fanOut(ctx, ev, opts, targets)
}

// SendTo delivers ev to one subscriber, whatever its event filter. A paused
// subscriber's event is queued and held until it is resumed.
func (p *Producer) SendTo(ctx context.Context, subscriberID string, ev tasks.Event, opts *PublishOpts) (*PublishResult, error) {
	if err := p.checkEvent(&ev); err != nil {
		return nil, err
	}
	s, err := p.GetSubscriber(ctx, subscriberID)
	if err != nil {
		return nil, err
	}
	return p.fanOut(ctx, ev, opts, []tasks.Subscriber{s})
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

func (p *Producer) fanOut(ctx context.Context, ev tasks.Event, opts *PublishOpts, subs []tasks.Subscriber) (*PublishResult, error) {
	now := p.nowFunc()
	var notBefore time.Time
	if opts != nil && opts.NotBefore.After(now) {
		notBefore = opts.NotBefore
	}
	res := &PublishResult{EventID: ev.ID, Targets: make([]Target, len(subs))}
	if len(subs) == 0 {
		return res, nil
	}

	// Book each target a slot on its subscriber's pacing cursor, so that a
	// burst is spread at the subscriber's rate instead of queued all due
	// now. One round trip for all targets. An event with a future NotBefore
	// is paced when it becomes due instead.
	wake := make([]time.Time, len(subs))
	if notBefore.IsZero() {
		rs := make([]limits.Reservation, len(subs))
		for i, s := range subs {
			rs[i] = limits.Reservation{Subscriber: s.ID, Limit: s.Limit}
		}
		var err error
		if wake, err = p.gates.Reserve(ctx, rs...); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
	}

	var errs []error
	for i, s := range subs {
		t := &res.Targets[i]
		t.SubscriberID, t.TaskID = s.ID, tasks.TaskID(s.ID, ev.ID)
		d := tasks.Delivery{
			SubscriberID: s.ID, Event: ev, EnqueuedAt: now, NotBefore: notBefore,
			ExpiresAt: now.Add(cmp.Or(time.Duration(s.RetryHorizon), p.cfg.RetryHorizon)),
		}
		opts := []asynq.Option{
			asynq.TaskID(t.TaskID), asynq.Queue(p.cfg.Namespace), asynq.Retention(p.cfg.DedupWindow),
			asynq.MaxRetry(cmp.Or(s.MaxAttempts, p.cfg.MaxAttempts)),
		}
		// asynq keeps schedule times in whole seconds. A not-before time is
		// a promise, so it is rounded up. A pacing slot is not: the task is
		// due at the start of its slot's second and the worker waits the
		// rest (under a second) in the handler, so the limit is used in
		// full instead of losing a fraction of every second.
		switch {
		case !notBefore.IsZero():
			t.ProcessAt = limits.CeilSecond(notBefore)
		case wake[i].Sub(now) >= time.Second:
			t.ProcessAt = wake[i].Truncate(time.Second)
		}
		if !t.ProcessAt.IsZero() {
			opts = append(opts, asynq.ProcessAt(t.ProcessAt))
		}
		task, err := tasks.NewDeliverTask(d, opts...)
		if err == nil {
			_, err = p.client.EnqueueContext(ctx, task)
		}
		switch {
		case err == nil:
			t.Outcome = Enqueued
		case errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
			t.Outcome = Duplicate
		default:
			t.Outcome = Failed
			t.Err = fmt.Errorf("%w: subscriber %s: %v", ErrRedisUnavailable, s.ID, err)
			errs = append(errs, t.Err)
		}
	}
	return res, errors.Join(errs...)
}

// PutSubscriber creates or replaces a subscriber and returns it as stored,
// with defaults filled. When s has no secrets, a replaced subscriber keeps
// its secrets (so changing a URL does not break the receiver's
// verification) and a new one gets a generated secret.
func (p *Producer) PutSubscriber(ctx context.Context, s tasks.Subscriber) (tasks.Subscriber, error) {
	s, _, err := p.UpsertSubscriber(ctx, s)
	return s, err
}

// UpsertSubscriber is PutSubscriber that also reports whether the
// subscriber was created (true) or replaced.
func (p *Producer) UpsertSubscriber(ctx context.Context, s tasks.Subscriber) (tasks.Subscriber, bool, error) {
	keep := len(s.Secrets) == 0
	// Validate before touching Redis: a refused call writes nothing and
	// says why even while Redis is down.
	s, err := s.WithDefaults()
	if err != nil {
		return s, false, err
	}
	s.Retiring = pruneRetiring(s.Retiring, p.nowFunc())
	if err := s.Validate(); err != nil {
		return s, false, err
	}
	created := false
	err = p.updateSubscribers(ctx, func(tx *redis.Tx) (func(redis.Pipeliner), error) {
		old, found, err := p.readSubscriber(ctx, tx, s.ID)
		if err != nil {
			return nil, err
		}
		created = !found
		if keep && found {
			s.Secrets, s.Retiring = old.Secrets, pruneRetiring(old.Retiring, p.nowFunc())
		}
		return p.writeSubscriber(ctx, s, true), nil
	})
	if err != nil {
		return s, false, err
	}
	return s, created, nil
}

// updateSubscribers runs a read-modify-write of the subscribers hash as an
// optimistic transaction: read (under WATCH) returns the writes to make, and
// a concurrent change to the hash makes it start over.
func (p *Producer) updateSubscribers(ctx context.Context, read func(tx *redis.Tx) (func(redis.Pipeliner), error)) error {
	var readErr error
	for range 20 {
		err := p.rdb.Watch(ctx, func(tx *redis.Tx) error {
			write, err := read(tx)
			if err != nil {
				readErr = err
				return err
			}
			_, err = tx.TxPipelined(ctx, func(pl redis.Pipeliner) error { write(pl); return nil })
			return err
		}, p.keys.Subscribers())
		switch {
		case err == nil:
			return nil
		case readErr != nil:
			return readErr
		case !errors.Is(err, redis.TxFailedErr):
			return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
		}
	}
	return fmt.Errorf("%w: subscribers kept changing during the update; try again", ErrRedisUnavailable)
}

// readSubscriber reads one stored subscriber (without its paused flag).
func (p *Producer) readSubscriber(ctx context.Context, c redis.Cmdable, id string) (tasks.Subscriber, bool, error) {
	var s tasks.Subscriber
	v, err := c.HGet(ctx, p.keys.Subscribers(), id).Result()
	if errors.Is(err, redis.Nil) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, false, fmt.Errorf("subscriber %s: stored value unreadable: %w", id, err)
	}
	return s, true, nil
}

// writeSubscriber returns the writes that store s; setPaused also stores
// s.Paused, which is kept apart from the JSON (see tasks.Keys.Paused).
func (p *Producer) writeSubscriber(ctx context.Context, s tasks.Subscriber, setPaused bool) func(redis.Pipeliner) {
	stored := s
	stored.Paused = false
	b, _ := json.Marshal(stored) // plain data: cannot fail
	return func(tx redis.Pipeliner) {
		tx.HSet(ctx, p.keys.Subscribers(), s.ID, b)
		switch {
		case !setPaused:
		case s.Paused:
			tx.SAdd(ctx, p.keys.Paused(), s.ID)
		default:
			tx.SRem(ctx, p.keys.Paused(), s.ID)
		}
	}
}

// GetSubscriber returns ErrUnknownSubscriber when there is none with id.
func (p *Producer) GetSubscriber(ctx context.Context, id string) (tasks.Subscriber, error) {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return tasks.Subscriber{}, err
	}
	var get *redis.StringCmd
	var paused *redis.BoolCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		get = pl.HGet(ctx, p.keys.Subscribers(), id)
		paused = pl.SIsMember(ctx, p.keys.Paused(), id)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return tasks.Subscriber{}, fmt.Errorf("%w: %s", ErrUnknownSubscriber, id)
	}
	if err != nil {
		return tasks.Subscriber{}, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	var s tasks.Subscriber
	if err := json.Unmarshal([]byte(get.Val()), &s); err != nil {
		return s, fmt.Errorf("subscriber %s: stored value unreadable: %w", id, err)
	}
	s.Paused = paused.Val()
	return s, nil
}

// ListSubscribers returns every subscriber, in no particular order.
func (p *Producer) ListSubscribers(ctx context.Context) ([]tasks.Subscriber, error) {
	var all *redis.MapStringStringCmd
	var paused *redis.StringSliceCmd
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		all = pl.HGetAll(ctx, p.keys.Subscribers())
		paused = pl.SMembers(ctx, p.keys.Paused())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	isPaused := make(map[string]bool, len(paused.Val()))
	for _, id := range paused.Val() {
		isPaused[id] = true
	}
	out := make([]tasks.Subscriber, 0, len(all.Val()))
	for id, v := range all.Val() {
		var s tasks.Subscriber
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			p.cfg.Logger.Error("skipping unreadable subscriber", "subscriber_id", id, "err", err)
			continue
		}
		s.Paused = isPaused[id]
		out = append(out, s)
	}
	return out, nil
}

// DeleteSubscriber removes a subscriber and its gate state. Events still
// queued for it are dead-lettered by the worker with reason
// "subscriber deleted".
func (p *Producer) DeleteSubscriber(ctx context.Context, id string) error {
	if err := tasks.ValidateSubscriberID(id); err != nil {
		return err
	}
	n, err := p.rdb.HDel(ctx, p.keys.Subscribers(), id).Result()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownSubscriber, id)
	}
	if err := p.rdb.SRem(ctx, p.keys.Paused(), id).Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	if err := p.gates.Forget(ctx, id); err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}

// SetPaused pauses or resumes a subscriber. Paused subscribers get no new
// events from Publish and their queued events are held.
func (p *Producer) SetPaused(ctx context.Context, id string, paused bool) error {
	if _, err := p.GetSubscriber(ctx, id); err != nil {
		return err
	}
	var err error
	if paused {
		err = p.rdb.SAdd(ctx, p.keys.Paused(), id).Err()
	} else {
		err = p.rdb.SRem(ctx, p.keys.Paused(), id).Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
	}
	return nil
}
