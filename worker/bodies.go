package worker

import (
	"sync"
	"time"
)

// bodies keeps the stored events this process read last, by their key, so
// that an event fanned out to several subscribers is read from Redis once
// a process, not once a delivery. A stored event never changes while it is
// stored (a publish of another body under its id is refused), and it is
// stored until its subscribers' horizons + producer.EventMargin (10 min)
// at least: a body put when a delivery of it is admitted (within its
// horizon) and served for bodiesTTL (less than that margin) after is the
// stored one, never the body of a later event under the same id once the
// first is gone. Bounded by bytes: the oldest go first; a body over a
// sixteenth of the bound is not kept.
type bodies struct {
	mu    sync.Mutex
	max   int
	size  int
	byKey map[string]kept
	order []string // oldest first
	now   func() time.Time
}

type kept struct {
	body []byte
	at   time.Time // when it was put
}

// bodiesMax is the bytes kept in a process; bodiesTTL how long a body is
// served after it was put.
const (
	bodiesMax = 8 << 20
	bodiesTTL = time.Minute
)

func newBodies(max int) *bodies { return &bodies{max: max, byKey: map[string]kept{}, now: time.Now} }

// get is the body kept for key, if any, put less than bodiesTTL ago.
func (c *bodies) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.byKey[key]
	if !ok || c.now().Sub(k.at) >= bodiesTTL {
		return nil, false
	}
	return k.body, true
}

// put keeps body under key, the oldest let go to make room.
func (c *bodies) put(key string, body []byte) {
	n := len(key) + len(body)
	if len(body) == 0 || n > c.max/16 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.byKey[key]; ok {
		c.byKey[key] = kept{body: k.body, at: c.now()} // read again: its time starts again
		return
	}
	for c.size+n > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.size -= len(old) + len(c.byKey[old].body)
		delete(c.byKey, old)
	}
	c.byKey[key], c.size = kept{body: body, at: c.now()}, c.size+n
	c.order = append(c.order, key)
}
