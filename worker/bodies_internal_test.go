package worker

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// The kept bodies stay within their bound, the oldest let go first; a body
// over a sixteenth of it, or empty, is not kept.
func TestBodiesKeepTheNewestWithinTheirBound(t *testing.T) {
	c := newBodies(1600)
	body := bytes.Repeat([]byte("x"), 96) // 100 bytes with its key "k%03d"
	for i := range 40 {
		c.put(fmt.Sprintf("k%03d", i), body)
	}
	if c.size > 1600 || len(c.byKey) != 16 {
		t.Fatalf("%d bytes in %d bodies; want 16 bodies, at most 1600 bytes", c.size, len(c.byKey))
	}
	if _, ok := c.get("k023"); ok {
		t.Fatal("k023 kept; want the oldest 24 let go")
	}
	if b, ok := c.get("k039"); !ok || !bytes.Equal(b, body) {
		t.Fatal("k039, the newest, not kept")
	}
	c.put("big", bytes.Repeat([]byte("x"), 101))
	c.put("empty", nil)
	if _, ok := c.get("big"); ok {
		t.Fatal("a body over a sixteenth of the bound kept")
	}
	if _, ok := c.get("empty"); ok {
		t.Fatal("an empty body kept")
	}
}

// A kept body is served for bodiesTTL after it was put (again), then read
// from Redis: its event's id may be taken by another event once the first
// is no longer stored, producer.EventMargin after its last delivery's
// horizon at the soonest.
func TestBodiesServeAKeptBodyForTheirTTL(t *testing.T) {
	c := newBodies(1600)
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	c.put("k", []byte("one"))
	now = now.Add(bodiesTTL - time.Second)
	if b, ok := c.get("k"); !ok || string(b) != "one" {
		t.Fatalf("within its TTL: %q, %v; want it kept", b, ok)
	}
	c.put("k", []byte("one")) // a delivery of it admitted again
	now = now.Add(bodiesTTL - time.Second)
	if _, ok := c.get("k"); !ok {
		t.Fatal("within its TTL from the second put: not served")
	}
	now = now.Add(time.Second)
	if b, ok := c.get("k"); ok {
		t.Fatalf("past its TTL: %q served; want it read again", b)
	}
}
