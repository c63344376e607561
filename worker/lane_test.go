package worker

import (
	"testing"
	"time"
)

// The wait room caps the tasks waiting in a process per destination and in
// all; a task that leaves frees its place.
func TestWaitRoomCaps(t *testing.T) {
	w := newWaitRoom(2, 3)
	a1, ok1 := w.enter("a")
	_, ok2 := w.enter("a")
	if !ok1 || !ok2 {
		t.Fatal("the first two of a refused")
	}
	if _, ok := w.enter("a"); ok {
		t.Fatal("a third task of a let in; the cap per destination is 2")
	}
	b1, ok := w.enter("b")
	if !ok {
		t.Fatal("b refused with room left in the process")
	}
	if _, ok := w.enter("c"); ok {
		t.Fatal("a fourth task let in; the cap in all is 3")
	}
	w.leave("a", a1)
	if _, ok := w.enter("c"); !ok {
		t.Fatal("c refused after a task of a left")
	}
	w.leave("b", b1)
	if _, ok := w.m["b"]; ok {
		t.Fatal("b's lane kept after its last task left")
	}
}

// Each release here lets one head of the busy lane look: a group's
// commit releases several slots at once, and the lane keeps count.
func TestBusyLaneCountsReleases(t *testing.T) {
	w := newWaitRoom(2, 3)
	a1, _ := w.enter("a")
	for range 3 {
		w.released("a")
	}
	for i := range 3 {
		if freed, ok := a1.waitFreed(t.Context(), 100*time.Millisecond); !freed || !ok {
			t.Fatalf("release %d of 3 not kept: freed %v, ok %v", i+1, freed, ok)
		}
	}
	if freed, ok := a1.waitFreed(t.Context(), time.Millisecond); freed || !ok {
		t.Fatalf("a fourth release seen after three: freed %v, ok %v", freed, ok)
	}
}
