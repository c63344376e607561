package worker

import (
	"sync"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// subCache keeps each subscriber's configuration for up to a second, so a
// delivery does not spend a round trip re-reading it. Changes to the URL,
// secrets or limits therefore apply within a second; deletion, pausing and
// cooldowns are seen at once (Admit checks them in Redis).
type subCache struct {
	mu  sync.Mutex
	m   map[string]cachedSub
	ttl time.Duration
}

type cachedSub struct {
	s  tasks.Subscriber
	at time.Time
}

func newSubCache(ttl time.Duration) *subCache { return &subCache{m: map[string]cachedSub{}, ttl: ttl} }

func (c *subCache) get(id string) (tasks.Subscriber, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || time.Since(e.at) > c.ttl {
		return tasks.Subscriber{}, false
	}
	return e.s, true
}

func (c *subCache) put(id string, s tasks.Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 100_000 { // bound memory if subscribers churn
		clear(c.m)
	}
	c.m[id] = cachedSub{s, time.Now()}
}

func (c *subCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}
