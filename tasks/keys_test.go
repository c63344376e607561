package tasks_test

import (
	"reflect"
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

// slotGroups says, for every method of tasks.Keys, which slot its keys
// must share: "dir" (the directory), "sub" (the subscriber's, with its
// gate keys and dead letters), "event", "ready" (the region's ready
// index), "totals", "queue" (asynq's queue), "own" (a key alone in its
// slot, written apart), or "-" (no key: a name, a parser, a channel). A
// method missing here fails the test: a new key must say where it lives.
var slotGroups = map[string]string{
	"Namespace": "-", "SubscriberConfigs": "dir", "SubscriberVersion": "dir", "SubscriberIDs": "dir", "TypeIndex": "dir",
	"PrefixIndex": "dir", "AnyIndex": "dir", "IndexKeysFor": "dir", "IndexKeyOf": "dir", "MetricsIndex": "dir", "TenantNames": "dir", "Tenants": "dir",
	"Tokens": "dir", "TokenDigests": "dir", "TenantTokens": "dir", "TokensUsed": "dir", "PortalLink": "dir", "TenantFlow": "dir", "TenantTotals": "totals", "PortalSession": "dir",
	"PausedIndex": "dir", "OpenBreakers": "dir", "RegionSubscribers": "dir", "LegacyRegions": "dir",
	"Gate": "sub", "Gates": "sub", "Delivery": "sub", "DeliveryLog": "sub", "RateLimiterKey": "sub", "Stats": "sub",
	"Ledger": "sub", "DeadIndex": "sub", "DeadBatch": "sub", "DeadBatchSample": "sub", "LegacyLeftovers": "sub",
	"Event": "event", "LegacyEvent": "event",
	"TenantEvent": "own", // Event of "<tenant>/<id>": that event's slot, not id's
	"Ready":       "ready", "Claimed": "ready", "Rescuer": "ready", "RescuerCursor": "ready", "Serving": "own",
	"Totals": "totals", "TotalsFlushes": "totals", "Counters": "totals",
	"AsynqTask":    "queue",
	"AllDeadIndex": "own", "LegacyCounters": "own", "Cooling": "own", "DeadReportsDue": "own", "Layout": "own", "IngestLimiterKey": "own", "TenantIngestLimiterKey": "own",
	"DeliveryQueue": "-", "ShardQueue": "-", "LegacyQueue": "-", "QueueLane": "-", "OwnsQueue": "-", "QueueRegion": "-",
	"ReplicationMark": "-",
}

// Every key a script or transaction touches together shares a slot: each
// method of tasks.Keys is called (by reflection, so that none is missed)
// and its keys, and every field of the structs it returns, must fall in
// its group's slot; two subscribers' state spreads over slots.
func TestKeysShareTheirSlot(t *testing.T) {
	ns := tasks.Keys("hl:prod")
	args := map[reflect.Type]reflect.Value{reflect.TypeFor[string](): reflect.ValueOf("acme"), reflect.TypeFor[int](): reflect.ValueOf(3)}
	groups := map[string][]string{}
	v := reflect.ValueOf(ns)
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		group, ok := slotGroups[m.Name]
		if !ok {
			t.Errorf("tasks.Keys.%s is not in slotGroups: say which slot its keys share", m.Name)
			continue
		}
		if group == "-" {
			continue
		}
		in := make([]reflect.Value, m.Type.NumIn()-1)
		for j := range in {
			in[j] = args[m.Type.In(j+1)]
			if m.Name == "Ledger" || m.Name == "AsynqTask" && j == 1 {
				in[j] = reflect.ValueOf(tasks.TaskID("acme", "evt_1"))
			}
			if m.Name == "AsynqTask" && j == 0 {
				in[j] = reflect.ValueOf(ns.ShardQueue("eu", tasks.LaneFresh, 3))
			}
		}
		groups[group] = append(groups[group], keysOf(m.Func.Call(append([]reflect.Value{v}, in...))[0])...)
	}
	for group, keys := range groups {
		if group != "own" {
			same(t, group, keys)
		}
	}
	if g := ns.Gates("acme"); g.Rate != "rate:"+ns.RateLimiterKey("acme") {
		t.Errorf("the gate's rate key %q is not redis_rate's name for RateLimiterKey", g.Rate)
	}
	if slot(ns.Gate("acme")) == slot(ns.SubscriberConfigs()) || slot(ns.Event("e")) == slot(ns.Gate("acme")) {
		t.Error("the directory, a subscriber and an event share a slot")
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
	p, a, sc, r := tasks.AsynqQueueKeys(q)
	same(t, "queue "+q, []string{p, a, sc, r, ns.AsynqTask(q, "acme:evt_1")})
	if slot(p) == slot(ns.ShardQueue("eu", tasks.LaneFresh, 4)) && slot(p) == slot(ns.ShardQueue("eu", tasks.LaneFresh, 5)) {
		t.Error("three shards of a lane in one slot")
	}
}

// keysOf is every key in v: a string, a slice of strings, or the string
// fields of a struct.
func keysOf(v reflect.Value) []string {
	switch v.Kind() {
	case reflect.String:
		return []string{v.String()}
	case reflect.Slice:
		var out []string
		for i := range v.Len() {
			out = append(out, keysOf(v.Index(i))...)
		}
		return out
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			out = append(out, keysOf(v.Field(i))...)
		}
		return out
	}
	return nil
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
