package tasks_test

import (
	"strings"
	"testing"

	"github.com/hooklane/hooklane/tasks"
)

// slot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash tag (the
// part between the first { and the next }, when not empty), mod 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestSlotIsRedisClusters(t *testing.T) {
	// CLUSTER KEYSLOT answers, from Redis' documentation and a real server.
	for key, want := range map[string]int{"123456789": 12739, "foo": 12182, "{user1000}.following": 3443} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Every key a script or transaction touches together shares a slot: the
// directory's keys, and each subscriber's (its gate keys, counters, dead
// letters); two subscribers' state spreads over slots.
func TestKeysShareTheirSlot(t *testing.T) {
	ns := tasks.Keys("hl:prod")
	dir := []string{ns.SubscriberConfigs(), ns.SubscriberVersion("acme"), ns.SubscriberIDs(), ns.TypeIndex("video.trending"),
		ns.PrefixIndex("video."), ns.AnyIndex(), ns.Regions()}
	dir = append(dir, ns.IndexKeysFor("a.b.c")...)
	same(t, "directory", dir)
	g := ns.Gates("acme")
	lk := ns.Ledger(tasks.TaskID("acme", "evt_1"))
	same(t, "subscriber acme", []string{g.Record, g.Cooldown, g.InFlight, g.Rate, g.Pacing, g.Waiting, g.Seen + "evt_1", g.Fresh,
		"rate:" + ns.RateLimiterKey("acme"), ns.Gate("acme"), ns.Stats("acme"), lk.Entry, lk.Attempts, lk.Index, ns.DeadIndex("acme")})
	if g.Rate != "rate:"+ns.RateLimiterKey("acme") {
		t.Errorf("the gate's rate key %q is not redis_rate's name for RateLimiterKey", g.Rate)
	}
	slots := map[int]bool{}
	for i := range 50 {
		slots[slot(ns.Gate(strings.Repeat("s", i+1)))] = true
	}
	if len(slots) < 45 {
		t.Errorf("50 subscribers' gate records fall in %d slots; want them spread", len(slots))
	}
	// asynq's keys of one queue share the queue's slot, and the shards of a
	// lane are different queues.
	q := ns.ShardQueue("eu", tasks.LaneFresh, 3)
	p, a, s, r := tasks.AsynqQueueKeys(q)
	same(t, "queue "+q, []string{p, a, s, r, ns.AsynqTask(q, "acme:evt_1")})
	if slot(p) == slot(ns.ShardQueue("eu", tasks.LaneFresh, 4)) && slot(p) == slot(ns.ShardQueue("eu", tasks.LaneFresh, 5)) {
		t.Error("three shards of a lane in one slot")
	}
}

func same(t *testing.T, what string, keys []string) {
	t.Helper()
	for _, k := range keys[1:] {
		if slot(k) != slot(keys[0]) {
			t.Errorf("%s: %q is in slot %d, %q in %d", what, k, slot(k), keys[0], slot(keys[0]))
		}
	}
}

func TestValidateNamespace(t *testing.T) {
	for _, ok := range []string{"hooklane", "hl:prod", "a.b-c_d"} {
		if err := tasks.ValidateNamespace(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a{b}", "a}", "a b", strings.Repeat("n", 65), "ns\n"} {
		if err := tasks.ValidateNamespace(bad); err == nil {
			t.Errorf("%q accepted; a brace would move every hash tag", bad)
		}
	}
}
