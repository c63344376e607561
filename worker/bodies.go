package worker

import "sync"

// bodies keeps the stored events this process read last, by their key, so
// that an event fanned out to several subscribers is read from Redis once
// a process, not once a delivery. A stored event never changes (an event
// id is one event: a publish of another body under it is refused), so a
// kept body is the stored one. Bounded by bytes: the oldest go first; a
// body over a sixteenth of the bound is not kept.
type bodies struct {
	mu    sync.Mutex
	max   int
	size  int
	byKey map[string][]byte
	order []string // oldest first
}

// bodiesMax is the bytes kept in a process.
const bodiesMax = 8 << 20

func newBodies(max int) *bodies { return &bodies{max: max, byKey: map[string][]byte{}} }

// get is the body kept for key, if any.
func (c *bodies) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.byKey[key]
	return b, ok
}

// put keeps body under key, the oldest let go to make room.
func (c *bodies) put(key string, body []byte) {
	n := len(key) + len(body)
	if len(body) == 0 || n > c.max/16 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	for c.size+n > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.size -= len(old) + len(c.byKey[old])
		delete(c.byKey, old)
	}
	c.byKey[key], c.size = body, c.size+n
	c.order = append(c.order, key)
}
