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
	w.leave("a", a1, true)
	if _, ok := w.enter("c"); !ok {
		t.Fatal("c refused after a task of a left")
	}
	w.leave("b", b1, true)
	if _, ok := w.m["b"]; ok {
		t.Fatal("b's lane kept after its last task left")
	}
}

// A batch's deliveries waiting in their destination's busy lane take one
// place of the room between them, the one handler their task holds: with
// one place a destination, a batch's three wait together while a task of
// its own is refused, and the place is free once the last of the three
// left. (Counted a delivery each, the room held a fast endpoint of 20
// slots to 70 deliveries handed out, the next hand-out a turn, an enqueue
// and a poll away: 0.15 of its slots' pace, BenchmarkSlotLimited.)
func TestABatchsWaitingDeliveriesShareOnePlace(t *testing.T) {
	h := &handler{room: newWaitRoom(1, 10)}
	c := newBatchCalls(3, nil, nil, nil)
	var runs []*run
	var lanes []*lane
	for i := range 3 {
		r := c.newRun(&run{sub: "a"})
		l, ok := h.enterRoom(r)
		if !ok {
			t.Fatalf("the batch's delivery %d refused a place in the room; its first took the batch's", i)
		}
		runs, lanes = append(runs, r), append(lanes, l)
	}
	if _, ok := h.enterRoom(&run{sub: "a"}); ok {
		t.Fatal("a task of its own let in beside the batch; the cap per destination is 1")
	}
	for i := range 3 {
		if h.room.total != 1 {
			t.Fatalf("%d of the batch's deliveries left: the room counts %d places taken; want the batch's 1", i, h.room.total)
		}
		h.leaveRoom(runs[i], lanes[i])
	}
	if h.room.total != 0 || len(h.room.m) != 0 {
		t.Fatalf("the batch gone: %d places taken, %d lanes; want none", h.room.total, len(h.room.m))
	}
	if _, ok := h.enterRoom(&run{sub: "a"}); !ok {
		t.Fatal("a task refused once the batch left")
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
