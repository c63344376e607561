package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/tasks"
)

// subCache keeps each subscriber's configuration, so a delivery does not
// spend a round trip re-reading it. Admit answers the configuration's
// version (the gate record's "cv", written with every change): a run whose
// cached copy is older reads it again before its request, so a changed URL
// or a secret rotated out applies at once. A run that Admit checks this
// way uses a copy up to verifiedConfigAge old; what no Admit checks (a
// dispatcher's turn, the rescuer) up to configAge. Deletion, pausing and
// cooldowns are read by Admit itself.
type subCache struct {
	mu sync.Mutex
	m  map[string]cachedSub
}

// cachedSub is a subscriber's configuration and its version.
type cachedSub struct {
	tasks.Subscriber
	version string
	at      time.Time
}

// How old a cached configuration may be: read by a run that Admit checks
// (its version compared: subscriberToAdmit), or by anything else.
const (
	verifiedConfigAge = time.Minute
	configAge         = time.Second
)

func newSubCache() *subCache { return &subCache{m: map[string]cachedSub{}} }

// get returns id's cached configuration, if it is no older than age (a
// copy without a version, which Admit cannot check, configAge).
func (c *subCache) get(id string, age time.Duration) (cachedSub, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if e.version == "" {
		age = min(age, configAge)
	}
	if !ok || time.Since(e.at) > age {
		return cachedSub{}, false
	}
	return e, true
}

func (c *subCache) put(s cachedSub) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 100_000 { // bound memory if subscribers churn
		clear(c.m)
	}
	s.at = time.Now()
	c.m[s.ID] = s
}

func (c *subCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// errDeleted: the subscriber is not in the directory.
var errDeleted = errors.New("subscriber deleted")

// subscriber returns subscriber id's configuration from the cache (read
// within configAge), or from Redis when the cache has none, or not version
// (when not "").
func (h *handler) subscriber(ctx context.Context, id, version string) (cachedSub, error) {
	return h.subscriberAged(ctx, id, version, configAge)
}

// subscriberToAdmit is subscriber for a run, whose Admit compares the
// copy's version with the configuration's: read within verifiedConfigAge.
func (h *handler) subscriberToAdmit(ctx context.Context, id string) (cachedSub, error) {
	return h.subscriberAged(ctx, id, "", verifiedConfigAge)
}

func (h *handler) subscriberAged(ctx context.Context, id, version string, age time.Duration) (cachedSub, error) {
	if s, ok := h.subs.get(id, age); ok && (version == "" || s.version == version) {
		return s, nil
	}
	var cfg, ver *redis.StringCmd
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cfg, ver = p.HGet(ctx, h.keys.SubscriberConfigs(), id), p.Get(ctx, h.keys.SubscriberVersion(id))
		return nil
	})
	if errors.Is(cfg.Err(), redis.Nil) {
		h.subs.forget(id)
		return cachedSub{}, errDeleted
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return cachedSub{}, h.infra("load subscriber", id, err)
	}
	s := cachedSub{version: ver.Val()}
	if err := json.Unmarshal([]byte(cfg.Val()), &s.Subscriber); err != nil {
		return cachedSub{}, h.infra("load subscriber", id, fmt.Errorf("subscriber %s unreadable: %w", id, err))
	}
	h.subs.put(s)
	return s, nil
}
