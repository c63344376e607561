package worker

import (
	"context"
	"sync"
	"time"
)

// waitRoom accounts for the tasks that wait inside this process instead of
// being deferred, in a destination's busy lane for a free in-flight slot.
// It caps them per destination and in all, so that slow destinations
// cannot hold every handler: a place is a handler, so a batch's waiting
// deliveries share one (handler.enterRoom).
//
// The busy lane exists because a free in-flight slot cannot be booked
// ahead: only the lane's head asks Redis, when a slot of the destination
// was released here or at its poll (backing off while nothing is), while
// the others wait their turn in the process. Without it every waiter
// would poll Redis. A run waiting for a rate slot it booked is not in it.
type waitRoom struct {
	mu      sync.Mutex
	m       map[string]*lane
	perDest int
	all     int
	total   int
}

type lane struct {
	// places: the tasks waiting in it, which the room's caps count (a
	// batch's waiting deliveries take one: the one handler their task
	// holds, handler.enterRoom); waiters: every run waiting in it
	places, waiters int
	turn            chan struct{} // holds one token while a task is the busy lane's head
	freed           chan struct{} // a slot of the destination was released in this process: one each (up to freedMax)
}

func newWaitRoom(perDest, all int) *waitRoom {
	return &waitRoom{m: map[string]*lane{}, perDest: perDest, all: all}
}

// enter takes a place for a task of dest, or reports false when dest or
// the process has no room left.
func (w *waitRoom) enter(dest string) (*lane, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.m[dest]
	if l == nil {
		l = &lane{turn: make(chan struct{}, 1), freed: make(chan struct{}, freedMax)}
		w.m[dest] = l
	}
	if l.places >= w.perDest || w.total >= w.all {
		if l.waiters == 0 {
			delete(w.m, dest)
		}
		return nil, false
	}
	l.places++
	l.waiters++
	w.total++
	return l, true
}

// join adds a run to lane l of dest in a place another run took (its
// batch's): the caps count it no more.
func (w *waitRoom) join(l *lane) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l.waiters++
}

// leave takes a run out of lane l of dest, and its place when place (the
// last of a batch's runs that shared it).
func (w *waitRoom) leave(dest string, l *lane, place bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if place {
		l.places--
		w.total--
	}
	if l.waiters--; l.waiters == 0 {
		delete(w.m, dest)
	}
}

// freedMax is how many releases a busy lane keeps count of: a group's
// commit releases up to a batch's slots at once, and each lets the lane's
// next head look at once.
const freedMax = 64

// released tells dest's busy lane, if any, that one of its slots is free.
func (w *waitRoom) released(dest string) {
	w.mu.Lock()
	l := w.m[dest]
	w.mu.Unlock()
	if l != nil {
		select {
		case l.freed <- struct{}{}:
		default:
		}
	}
}

// lock makes the caller the busy lane's head, or reports false at deadline.
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

// waitFreed waits until a slot of the lane's destination is released here
// (freed), poll passes, or ctx is done (ok false).
func (l *lane) waitFreed(ctx context.Context, poll time.Duration) (freed, ok bool) {
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-l.freed:
		return true, true
	case <-t.C:
		return false, true
	case <-ctx.Done():
		return false, false
	}
}

// sleep waits d or until ctx is done, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
