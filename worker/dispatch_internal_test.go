package worker

import (
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// A turn asked of a dispatcher while it claims or runs turns is kept for
// its next sleep to end by, without waking it at once: its loop looks
// again when something is due, not after every claim that ran turns. One
// asked while it sleeps wakes it when sooner than it means to look.
func TestDispatcherKeepsWhatIsAskedWhileAwake(t *testing.T) {
	d := &dispatcher{region: tasks.DefaultRegion, wake: make(chan struct{}, 1), awake: true}
	ds := &dispatchers{loops: map[string]*dispatcher{tasks.DefaultRegion: d}}
	now := time.Now()
	ds.poke("", now.Add(300*time.Millisecond))
	ds.poke("", now.Add(100*time.Millisecond))
	ds.poke("", now.Add(200*time.Millisecond))
	if !d.pokedAt.Equal(now.Add(100*time.Millisecond)) || len(d.wake) != 0 {
		t.Fatalf("awake: kept %v, %d wakes; want the earliest (+100ms), none", d.pokedAt.Sub(now), len(d.wake))
	}
	d.awake, d.pokedAt, d.sleepTo = false, time.Time{}, now.Add(time.Second)
	ds.poke("", now.Add(2*time.Second))
	if len(d.wake) != 0 {
		t.Fatal("asleep until +1s: woken for a turn due at +2s")
	}
	ds.poke("", now.Add(500*time.Millisecond))
	if len(d.wake) != 1 {
		t.Fatal("asleep until +1s: not woken for a turn due at +0.5s")
	}
	if got := earliest(time.Time{}, now); !got.Equal(now) || !earliest(now, time.Time{}).Equal(now) || !earliest(now.Add(time.Second), now).Equal(now) {
		t.Fatal("earliest: a zero time is none, else the earlier")
	}
}
