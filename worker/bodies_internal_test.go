package worker

import (
	"bytes"
	"fmt"
	"testing"
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
