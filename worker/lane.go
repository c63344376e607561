package worker

import (
	"context"
	"sync"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// lanes queue the tasks of one destination that wait in this process for a
// short gate (in-flight slot or rate limit). Only the lane's head polls
// Redis; the others wait their turn here. Without this, every waiter would
// sleep the limiter's same RetryAfter and wake together to be denied again.
type lanes struct {
	mu  sync.Mutex
	m   map[string]*lane
	cap int
}

type lane struct {
	waiters int
	turn    chan struct{} // holds one token while a task is the head
}

func newLanes(capacity int) *lanes { return &lanes{m: map[string]*lane{}, cap: capacity} }

// join enters dest's lane, or reports false when it already has cap waiters.
func (ls *lanes) join(dest string) (*lane, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[dest]
	if l == nil {
		l = &lane{turn: make(chan struct{}, 1)}
		ls.m[dest] = l
	}
	if l.waiters >= ls.cap {
		return nil, false
	}
	l.waiters++
	return l, true
}

func (ls *lanes) leave(dest string, l *lane) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l.waiters--; l.waiters == 0 {
		delete(ls.m, dest)
	}
}

// lock makes the caller the lane's head, or reports false at deadline.
func (l *lane) lock(ctx context.Context, deadline time.Time) bool {
	select {
	case l.turn <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.turn <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (l *lane) unlock() { <-l.turn }

// sleep waits d or until ctx is done, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

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
