package tasks

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/hooklane/hooklane/limits"
)

// Keys names every Redis key hooklane writes in one namespace, and the few
// of asynq's it reads. Nothing else builds a key.
//
// Redis Cluster decides a key's slot by its hash tag, the part between the
// first { and }. A script or MULTI may only touch one slot, so:
//
//   - {<ns>:subs} holds the subscriber directory: every subscriber's
//     configuration, the list of ids and the event-type index that Publish
//     reads, so that a subscriber's configuration and its index entries
//     change in one transaction.
//   - {<subscriber id>} holds everything per destination that a delivery
//     reads or writes in one step: the gate record (existence, generation,
//     pause), cooldown, in-flight slots, the rate limiter, the pacing
//     cursor, the waiting index, counters and the dead letters with their
//     attempts.
//   - asynq keeps each queue in slot {<queue>} (asynq:{<queue>}:…).
//   - The rest (global dead-letter index, global counters, the totals
//     and cooling set /metrics reads) has a slot of its own each and is
//     written apart, in an order that readers tolerate.
//
// Lifetimes are named beside each key. "Owner" is who writes it.
type Keys string

// ValidateNamespace refuses a namespace that would break the key layout:
// a brace would move the hash tags (and with them the slots), a space or
// control character is no key a person can type.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > 64 || !idChars(ns, false) {
		return invalid("namespace", "want 1-64 characters of A-Z a-z 0-9 . _ - :")
	}
	return nil
}

// Namespace is the namespace the keys are under.
func (ns Keys) Namespace() string { return string(ns) }

func (ns Keys) dir(rest string) string { return string(ns) + ":{" + string(ns) + ":subs}:" + rest }

func (ns Keys) sub(id, rest string) string { return string(ns) + ":s:{" + id + "}:" + rest }

// SubscriberConfigs is a hash: subscriber id → Subscriber JSON (without its
// gate record). Slot {<ns>:subs}, so Publish reads the index and the
// configurations of its targets in one script. Owner: producer. An entry
// lives until its subscriber is deleted.
func (ns Keys) SubscriberConfigs() string { return ns.dir("configs") }

// SubscriberVersion is a counter incremented by every change of one
// subscriber's configuration: an update WATCHes it, so that updates of
// different subscribers never make each other start over. Slot
// {<ns>:subs}. Owner: producer. Lives forever (a few bytes per id ever used).
func (ns Keys) SubscriberVersion(id string) string { return ns.dir("version:" + id) }

// SubscriberIDs is a sorted set of every subscriber id, all with score 0
// so that ZRANGEBYLEX pages through them in id order. Slot {<ns>:subs}.
// Owner: producer. Lives while any subscriber does.
func (ns Keys) SubscriberIDs() string { return ns.dir("ids") }

// TypeIndex is the set of subscribers that name event type t exactly.
// Slot {<ns>:subs}. Owner: producer, in the transaction that writes their
// configuration.
func (ns Keys) TypeIndex(t string) string { return ns.dir("type:" + t) }

// PrefixIndex is the set of subscribers with a filter "<prefix>*"; prefix
// ends with the dot. Slot {<ns>:subs}. Owner: producer.
func (ns Keys) PrefixIndex(prefix string) string { return ns.dir("prefix:" + prefix) }

// AnyIndex is the set of subscribers without a filter (every type).
// Slot {<ns>:subs}. Owner: producer.
func (ns Keys) AnyIndex() string { return ns.dir("any") }

// IndexKeysFor are the index sets an event of type t is looked up in: its
// exact type, every "<prefix>." it starts with, and AnyIndex.
func (ns Keys) IndexKeysFor(t string) []string {
	keys := []string{ns.TypeIndex(t)}
	if !IsOperatorType(t) { // an unfiltered subscriber gets no operator event
		keys = append(keys, ns.AnyIndex())
	}
	for i := 0; i < len(t); i++ {
		if t[i] == '.' {
			keys = append(keys, ns.PrefixIndex(t[:i+1]))
		}
	}
	return keys
}

// IndexKeyOf is the index set a filter entry ("video.trending" or
// "video.*") puts its subscriber in.
func (ns Keys) IndexKeyOf(filter string) string {
	if prefix, ok := strings.CutSuffix(filter, "*"); ok {
		return ns.PrefixIndex(prefix)
	}
	return ns.TypeIndex(filter)
}

// Gate is a subscriber's gate record, a hash the gate script reads fresh on
// every delivery: "gen" (the generation: a new one each time the id is
// created, so a deleted subscriber's queued tasks are never sent to a
// re-created one), "paused" (the pause reason; absent: not paused),
// "paused_at", and the circuit breaker's fields b_* (limits/breaker.go:
// failures in a row, failing since, open since, next probe, gap, probe in
// flight, held tasks' cursor, last error, slow start). Slot {<id>}. Owner: producer (creation, pause, resume,
// deletion) and worker (410 Gone pauses). Lives until the subscriber is
// deleted.
func (ns Keys) Gate(id string) string { return ns.sub(id, "gate") }

// Gates are the keys of one subscriber's delivery gates, all in slot
// {<id>}. Owner: worker; the producer books pacing slots and resets them
// when the limit changes. Each expires by itself (see limits.Gates).
func (ns Keys) Gates(id string) limits.GateKeys {
	return limits.GateKeys{
		Record:   ns.Gate(id),
		Cooldown: ns.sub(id, "cooldown"),
		InFlight: ns.sub(id, "inflight"),
		// redis_rate's own name for a limiter key: "rate:" + the key given.
		Rate:    "rate:" + ns.sub(id, "gcra"),
		Pacing:  ns.sub(id, "pacing"),
		Waiting: ns.sub(id, "waiting"),
		// Read only: the publish markers of builds before the delivery
		// record replaced them; they expire by themselves.
		Seen:       ns.sub(id, "seen:"),
		Fresh:      ns.sub(id, "fresh"),
		Deliveries: ns.sub(id, "d:"),
		Log:        ns.sub(id, "log"),
	}
}

// Delivery is the delivery record of event eventID to subscriber id, a
// hash (see DeliveryRecord for its fields): the booking that makes a
// re-publish a duplicate, the state, the event's type and times, and
// every attempt. Slot {<id>}: the publish script writes it with the
// booking, the gate script marks it in flight, the worker's batched
// writes after a request add the attempt. Owner: producer (publish,
// resend) and worker. Lives for the retry horizon and the dedup window
// from its publish, and for the dedup window once its delivery ends.
func (ns Keys) Delivery(id, eventID string) string { return ns.Gates(id).Deliveries + eventID }

// DeliveryLog is a stream of one subscriber's deliveries in the order they
// were published: entry id = Redis' time of the publish, field "e" = the
// event id; the delivery log's pages read it newest first (XREVRANGE).
// Slot {<id>}.
// Owner: producer (the publish script appends, trimming entries older
// than the dedup window plus the retry horizon, and sets the stream to
// expire as long after its last entry; deleting the subscriber deletes it).
// Entries whose record has expired are skipped by readers.
func (ns Keys) DeliveryLog(id string) string { return ns.Gates(id).Log }

// Event holds one published event once, whatever its number of
// subscribers: a string "<published Unix ms> <subscriber id> …\n<Event
// JSON>" (ParseStoredEvent), so that a task need carry only a reference,
// GET /v1/events/{id} finds its deliveries and a resend its payload. Slot
// {<ns>:ev:<id>}, written in the publish's round trip. Owner: producer.
// Lives for the payload retention (producer.Config.PayloadRetention) and
// at least as long as a task published with it may run, from its last
// publish.
func (ns Keys) Event(id string) string { return string(ns) + ":{" + string(ns) + ":ev:" + id + "}" }

// RateLimiterKey is the key to give a redis_rate.Limiter to share the
// subscriber's limit (redis_rate prefixes it with "rate:").
func (ns Keys) RateLimiterKey(id string) string { return ns.sub(id, "gcra") }

// Stats is a hash of one subscriber's counters (see worker.ReadStats).
// Slot {<id>}. Owner: worker. Lives until the subscriber is deleted.
func (ns Keys) Stats(id string) string { return ns.sub(id, "stats") }

// LedgerKeys are the dead-letter ledger's keys of one task.
type LedgerKeys struct {
	// Entry is the ledger entry (DeadLetter JSON, without attempts).
	// Owner: worker (written before asynq archives the task), producer
	// (replay marks it, delete removes it). Lives until deleted, or for
	// the dead-letter retention.
	Entry string
	// Attempts is the list of requests made for the delivery (Attempt
	// JSON), kept while it is retrying and with its dead letter after.
	// Owner: worker. Lives until the retry horizon plus two days, or with
	// its dead letter.
	Attempts string
	// Index orders the subscriber's dead letters by time (score: Unix ms,
	// member: task id). Entries whose ledger entry is gone are dropped by
	// readers and trimmed past the retention.
	Index string
}

// Ledger names the ledger keys of task id "<subscriber>:<event>", in slot
// {<subscriber>} with the rest of its subscriber's state. A task id of
// another form (a task hooklane did not write) goes to slot
// {<ns>:orphans}.
func (ns Keys) Ledger(taskID string) LedgerKeys {
	sub, ev, ok := SplitTaskID(taskID)
	if !ok {
		tag := string(ns) + ":{" + string(ns) + ":orphans}:"
		return LedgerKeys{Entry: tag + "dead:" + taskID, Attempts: tag + "attempts:" + taskID, Index: tag + "dead-index"}
	}
	return LedgerKeys{Entry: ns.sub(sub, "dead:"+ev), Attempts: ns.sub(sub, "attempts:"+ev), Index: ns.DeadIndex(sub)}
}

// DeadIndex is LedgerKeys.Index of subscriber sub.
func (ns Keys) DeadIndex(sub string) string { return ns.sub(sub, "dead-index") }

// AllDeadIndex orders every dead letter by time (score: Unix ms; member:
// task id). Its own slot: it is written just before the entry, so it may
// name an entry that does not exist (readers drop those), never miss one.
func (ns Keys) AllDeadIndex() string { return string(ns) + ":dead-letters" }

// Counters is a hash of namespace-wide counters (dropped:<reason>) for
// what no longer has a subscriber to count under. Its own slot. Owner:
// worker. Lives forever.
func (ns Keys) Counters() string { return string(ns) + ":counters" }

// Totals is a hash of the counters of every subscriber together, with the
// fields of Stats (see worker.ReadTotals): what /metrics exports without a
// subscriber label, at a cost that does not grow with the subscribers.
// Each worker process sums its runs' counts in memory and adds them here
// about once a second, so a delivery costs no command of its own for it.
// Slot {<ns>:totals}. Owner: worker. Lives forever.
func (ns Keys) Totals() string { return string(ns) + ":{" + string(ns) + ":totals}" }

// Cooling is a sorted set of the subscribers whose destination was sent a
// cooldown (a 429's Retry-After or backoff; score: its end, Unix ms in
// Redis' clock, the latest one), so /metrics counts the destinations
// cooling down now with one ZCOUNT. Each worker process adds its new
// cooldowns with one script about once a second, which also drops the
// ended ones. An entry may outlive its subscriber until its cooldown
// ends. Slot {<ns>:cooling}. Owner: worker. Entries live until their
// cooldown ends (and the next flush).
func (ns Keys) Cooling() string { return string(ns) + ":{" + string(ns) + ":cooling}" }

// MetricsIndex is a sorted set of the subscribers marked for per-subscriber
// series in /metrics (Subscriber.Metrics), all with score 0 so that the
// scrape reads the first N by id with one ZRANGEBYLEX. Slot {<ns>:subs}:
// changed in the transaction that writes the configuration. Owner:
// producer. An entry lives while its subscriber is marked.
func (ns Keys) MetricsIndex() string { return ns.dir("metrics") }

// PausedIndex is the set of paused subscribers, for /metrics' count (one
// SCARD). Slot {<ns>:subs}. Owner: producer (pause, resume, deletion,
// migration) and worker (a 410 Gone pause); it is written just after the
// gate record, which stays the truth a delivery reads: a crash between
// the two leaves the count off until the next pause or resume of that
// subscriber. An entry lives while its subscriber is paused.
func (ns Keys) PausedIndex() string { return ns.dir("paused") }

// DeadBatch is a hash of the dead letters not yet reported in a
// hooklane.delivery.dead operator event: "n" (how many), "first" (Unix ms
// of the first: it names the event, so a report sent twice is one event),
// "last_sent" (Unix ms of the last report). Slot {<id>}. Owner: worker.
// Lives until its subscriber is deleted.
func (ns Keys) DeadBatch(id string) string { return ns.sub(id, "opsdead") }

// DeadBatchSample is a list of up to 20 "<event id> <reason>" of the
// unreported dead letters. Slot {<id>}. Owner: worker. Emptied by each
// report.
func (ns Keys) DeadBatchSample(id string) string { return ns.sub(id, "opsdead:ids") }

// DeadReportsDue is a sorted set: subscriber id → when (Unix ms) its dead
// letters are due to be reported. Slot {<ns>:ops}, written after the
// batch (a lost entry is written again by the next dead letter). Owner:
// worker. An entry lives until a worker claims it (ZREM).
func (ns Keys) DeadReportsDue() string { return string(ns) + ":{" + string(ns) + ":ops}:deaddue" }

// OpenBreakers is the set of subscribers whose circuit breaker is open, for
// /metrics' count (one SCARD). Slot {<ns>:subs}. Owner: worker (when a
// breaker opens or closes, after the gate record, which stays the truth a
// delivery reads), producer (deletion). An entry lives while the breaker is
// open.
func (ns Keys) OpenBreakers() string { return ns.dir("breakers_open") }

// Lanes of delivery queues. A subscriber's new tasks go to the fresh lane
// while it publishes no more than its fresh share per second; the rest,
// and every task that waits (a not-before time, a pacing slot ahead, a
// pause), go to the backlog lane. Each lane has asynq Servers of its own in
// every worker, so events of a subscriber with a small backlog never wait
// behind another's large one.
const (
	LaneFresh   = "f"
	LaneBacklog = "b"
)

// DefaultRegion names the region of subscribers without one in queue names
// and HOOKLANE_REGIONS.
const DefaultRegion = "default"

// DeliveryQueue is the asynq queue of the tasks of subscriber sub in lane,
// for a namespace whose queues are split in shards per lane and region.
// The shard is a hash of the id: stable, so a re-published event meets its
// first task in the same queue (asynq's task ids are unique per queue).
// asynq keeps each queue in slot {<queue>}: shards spread a Cluster's
// queue work over its masters.
func (ns Keys) DeliveryQueue(region, sub, lane string, shards int) string {
	return ns.ShardQueue(region, lane, Shard(sub, shards))
}

// ShardQueue is the asynq queue of one lane's shard in region ("" is
// DefaultRegion).
func (ns Keys) ShardQueue(region, lane string, shard int) string {
	if region == "" {
		region = DefaultRegion
	}
	return string(ns) + ":" + region + ":" + lane + strconv.Itoa(shard)
}

// OwnsQueue reports whether asynq queue q is one of the namespace's: a
// delivery queue (ShardQueue) or the legacy one.
func (ns Keys) OwnsQueue(q string) bool {
	if q == ns.LegacyQueue() {
		return true
	}
	rest, ok := strings.CutPrefix(q, string(ns)+":")
	if !ok {
		return false
	}
	region, shard, ok := strings.Cut(rest, ":")
	if !ok || (region != DefaultRegion && ValidateRegion(region) != nil) || len(shard) < 2 {
		return false
	}
	if lane := shard[:1]; lane != LaneFresh && lane != LaneBacklog {
		return false
	}
	_, err := strconv.Atoi(shard[1:])
	return err == nil
}

// QueueLane is the lane of delivery queue q (LaneFresh, LaneBacklog), ""
// for a queue that is not one of the namespace's lanes (the legacy queue).
func (ns Keys) QueueLane(q string) string {
	if q == ns.LegacyQueue() || !ns.OwnsQueue(q) {
		return ""
	}
	return q[strings.LastIndexByte(q, ':')+1:][:1]
}

// Shard is subscriber sub's shard of n.
func Shard(sub string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(sub))
	return int(h.Sum32() % uint32(n))
}

// LegacyQueue is the one queue of the release before this one (layout 1):
// workers keep delivering what it holds.
func (ns Keys) LegacyQueue() string { return string(ns) }

// Layout is a hash describing the namespace's layout, written once by the
// first process that uses it: "version" (2) and "shards" (queues per lane
// and region). Its own slot. Every process reads it at start and refuses
// to run with another shard count.
func (ns Keys) Layout() string { return string(ns) + ":layout" }

// Regions is the set of regions subscribers name. Slot {<ns>:subs}. Owner:
// producer. Workers serving every region read it to know which queues
// exist.
func (ns Keys) Regions() string { return ns.dir("regions") }

// IngestLimiterKey is the key to give a redis_rate.Limiter (which
// prefixes it with "rate:") for the publish limit of one API token, named
// by a hash of the token, never the token. Slot {<ns>:ingest:<hash>}.
// Owner: web. Lives a second or so past the last publish (redis_rate's
// expiry).
func (ns Keys) IngestLimiterKey(tokenHash string) string {
	return string(ns) + ":{" + string(ns) + ":ingest:" + tokenHash + "}"
}

// ReplicationMark is a Pub/Sub channel, not a key: the producer publishes
// an empty message on it just before a WAIT (producer.Config.WaitReplicas),
// as the write that WAIT counts replicas for. Nothing is stored and no one
// subscribes.
func (ns Keys) ReplicationMark() string { return string(ns) + ":replicated" }

// WaitingMember is how a task is listed in a subscriber's waiting index:
// its id and its queue, so it can be woken where it waits.
func WaitingMember(queue, taskID string) string { return taskID + "@" + queue }

// SplitWaitingMember is WaitingMember's inverse.
func SplitWaitingMember(m string) (queue, taskID string, ok bool) {
	i := strings.LastIndexByte(m, '@')
	if i < 0 {
		return "", "", false
	}
	return m[i+1:], m[:i], true
}

// V1 names the keys of the layout of the release before (version 1), which
// Migrate reads: one slot-less key per kind. Owner: that release; this one
// only reads them, and leaves them as they were, so that a rollback finds
// them.
type V1 string

// V1 is the layout-1 names of the namespace.
func (ns Keys) V1() V1 { return V1(ns) }

func (v V1) Subscribers() string             { return string(v) + ":subscribers" } // hash: id → Subscriber JSON
func (v V1) Paused() string                  { return string(v) + ":paused" }      // set of ids
func (v V1) DeadLetter(taskID string) string { return string(v) + ":dead:" + taskID }
func (v V1) Attempts(taskID string) string   { return string(v) + ":attempts:" + taskID }
func (v V1) DeadIndex() string               { return string(v) + ":dead-index" } // zset: task id → Unix ms
func (v V1) Stats(sub string) string         { return string(v) + ":stats:" + sub }
func (v V1) Cooldown(sub string) string      { return string(v) + ":cooldown:" + sub }
func (v V1) Pacing(sub string) string        { return string(v) + ":pacing:" + sub }
func (v V1) Rate(sub string) string          { return "rate:" + string(v) + ":" + sub }

// AsynqQueueKeys are asynq's keys of queue q that hold its backlog (its own
// names, read only by the load harness, which counts its backlog with four
// cheap commands instead of asynq's Inspector).
func AsynqQueueKeys(q string) (pending, active, scheduled, retry string) {
	pfx := "asynq:{" + q + "}:"
	return pfx + "pending", pfx + "active", pfx + "scheduled", pfx + "retry"
}

// AsynqQueues is asynq's set of every queue a task was ever enqueued in
// (asynq's key, untagged: a slot of its own). A
// worker serves the release before's queue only once that queue is in it.
const AsynqQueues = "asynq:queues"

// AsynqTask is asynq's hash of one task. It is asynq's key, not ours: the
// worker writes only its result field there, in the pipeline that follows a
// delivery, instead of a round trip of asynq's ResultWriter of its own.
// TestPublishTwiceDeliversOnce reads the result back through asynq's
// Inspector, so an asynq upgrade that moves it fails a test.
func (ns Keys) AsynqTask(queue, taskID string) string { return "asynq:{" + queue + "}:t:" + taskID }
