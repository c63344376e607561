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

// TypeIndex is the set of tenant's subscribers that name event type t
// exactly ("type:<t>" for the default tenant, "type:<tenant>/<t>" for
// another: a type holds no slash). Slot {<ns>:subs}. Owner: producer, in
// the transaction that writes their configuration.
func (ns Keys) TypeIndex(tenant, t string) string { return ns.dir("type:" + ScopedID(tenant, t)) }

// PrefixIndex is the set of tenant's subscribers with a filter
// "<prefix>*"; prefix ends with the dot. Slot {<ns>:subs}. Owner: producer.
func (ns Keys) PrefixIndex(tenant, prefix string) string {
	return ns.dir("prefix:" + ScopedID(tenant, prefix))
}

// AnyIndex is the set of tenant's subscribers without a filter (every
// type). Slot {<ns>:subs}. Owner: producer.
func (ns Keys) AnyIndex(tenant string) string {
	if tenant == "" || tenant == DefaultTenant {
		return ns.dir("any")
	}
	return ns.dir("any/" + tenant)
}

// IndexKeysFor are the index sets an event of tenant's of type t is
// looked up in: its exact type, every "<prefix>." it starts with, and
// AnyIndex, all of that tenant.
func (ns Keys) IndexKeysFor(tenant, t string) []string {
	keys := []string{ns.TypeIndex(tenant, t)}
	if !IsOperatorType(t) { // an unfiltered subscriber gets no operator event
		keys = append(keys, ns.AnyIndex(tenant))
	}
	for i := 0; i < len(t); i++ {
		if t[i] == '.' {
			keys = append(keys, ns.PrefixIndex(tenant, t[:i+1]))
		}
	}
	return keys
}

// IndexKeyOf is the index set a filter entry ("video.trending" or
// "video.*") puts a subscriber of tenant in.
func (ns Keys) IndexKeyOf(tenant, filter string) string {
	if prefix, ok := strings.CutSuffix(filter, "*"); ok {
		return ns.PrefixIndex(tenant, prefix)
	}
	return ns.TypeIndex(tenant, filter)
}

// Gate is a subscriber's gate record, a hash every delivery's scripts read
// fresh: "gen" (the generation: a new one each time the id is created, so
// a deleted subscriber's queued deliveries are never sent to a re-created
// one), "cv" (the configuration's version: a worker whose cached copy is
// older reads it again, so a rotated-out secret stops signing at once),
// "paused" (the pause reason; absent: not paused), "paused_at", the
// circuit breaker's fields b_* (limits/breaker.go), the effective rate's
// a_* and the window of recent 2xx it is learned from (limits/adaptive.go;
// written by Commit), "lt" (the endpoint's observed latency, for
// the in-flight pace), "wk" (a resume no turn has seen yet: the rescuer
// gives the subscriber one) and "ce_at", "ce_until" (when an operator last ended
// a running cooldown, and when that cooldown was to end:
// limits.Gates.EndCooldown). Slot {<id>}. Owner: producer (creation, changes,
// pause, resume, deletion) and worker (outcomes). Lives until the
// subscriber is deleted.
func (ns Keys) Gate(id string) string { return ns.sub(id, "gate") }

// Gates are the keys of one subscriber's delivery state, all in slot
// {<id>}: its gates (cooldown, in-flight slots, rate limiter), its
// schedule (the lot and which of it is retrying, the hand-outs, the
// horizons, the fresh lane), its delivery records and log, its counters
// and dead letters, so that every script of a delivery touches one slot. limits/doc.go describes what each
// holds and how long it lives.
func (ns Keys) Gates(id string) limits.GateKeys {
	return limits.GateKeys{
		Record:   ns.Gate(id),
		Cooldown: ns.sub(id, "cooldown"),
		InFlight: ns.sub(id, "inflight"),
		// redis_rate's own name for a limiter key: "rate:" + the key given.
		Rate:       "rate:" + ns.sub(id, "gcra"),
		Lot:        ns.sub(id, "lot"),
		Retry:      ns.sub(id, "retry"),
		Out:        ns.sub(id, "out"),
		Runs:       ns.sub(id, "runs"),
		Exp:        ns.sub(id, "exp"),
		Fresh:      ns.sub(id, "fresh"),
		Deliveries: ns.sub(id, "d:"),
		Log:        ns.sub(id, "log"),
		Stats:      ns.Stats(id),
		Dead:       ns.sub(id, "dead:"),
		Replaying:  ns.sub(id, "replaying:"),
		DeadIndex:  ns.DeadIndex(id),
		DeadBatch:  ns.DeadBatch(id),
		DeadSample: ns.DeadBatchSample(id),
	}
}

// Delivery is the delivery record of event eventID to subscriber id, a
// hash (see DeliveryRecord for its fields), the one owner of the
// delivery's state: the booking that makes a re-publish a duplicate, where
// the delivery is, its times and every attempt. Slot {<id>}. Owner:
// producer (the publish or resend that books it) and worker (the run that
// owns it, the dispatcher that hands it out). Lives until its due time +
// retry horizon + dedup window (one adopted from the release before too,
// or as long as that release gave it if longer); once it ends (delivered,
// dead), for the dedup window from then if that is longer.
func (ns Keys) Delivery(id, eventID string) string { return ns.Gates(id).Deliveries + eventID }

// DeliveryLog is a stream of one subscriber's deliveries in the order they
// were published: entry id = Redis' time of the publish, field "e" = the
// event id; the delivery log's pages read it newest first (XREVRANGE).
// Slot {<id>}. Owner: producer (the publish script appends, trimming
// entries older than the longest record lifetime it has booked, and sets
// the stream to expire as long after its last entry, and up to 10 min
// more, so that not every publish need lengthen it; deleting the
// subscriber deletes it). Entries whose record has expired are skipped by
// readers.
func (ns Keys) DeliveryLog(id string) string { return ns.Gates(id).Log }

// Event holds one published event once, whatever its number of
// subscribers: a hash (tasks/event.go: the body sent, the first publish's
// time, the digest a re-publish is compared by, the subscribers), so that
// a task need carry only a reference, GET /v1/events/{id} finds its
// deliveries and a resend its payload. Slot {<ns>:ev:<id>}, written in the
// publish's first round trip. Owner: producer. Lives until the latest due
// time it was published with + max(payload retention, longest retry
// horizon + 10 min).
func (ns Keys) Event(id string) string { return ns.legacyEvent(id) + ":e" }

// TenantEvent is Event of tenant's event id: the default tenant's is
// Event(id), another's Event("<tenant>/<id>") (an event id holds no
// slash), so that two tenants' events of one id are two events.
func (ns Keys) TenantEvent(tenant, id string) string { return ns.Event(scopedEvent(tenant, id)) }

// LegacyEvent is an event as the release before stored it, a string
// (ParseLegacyEvent), in the same slot as Event: read only, by the tasks
// of that release and the event pages, until it expires.
func (ns Keys) LegacyEvent(id string) string { return ns.legacyEvent(id) }

func (ns Keys) legacyEvent(id string) string {
	return string(ns) + ":{" + string(ns) + ":ev:" + id + "}"
}

// RateLimiterKey is the key to give a redis_rate.Limiter to share the
// subscriber's limit (redis_rate prefixes it with "rate:").
func (ns Keys) RateLimiterKey(id string) string { return ns.sub(id, "gcra") }

// Stats is a hash of one subscriber's counters (see worker.ReadStats).
// Slot {<id>}. Owner: worker. Lives until the subscriber is deleted.
func (ns Keys) Stats(id string) string { return ns.sub(id, "stats") }

// LedgerKeys are the dead-letter ledger's keys of one task.
type LedgerKeys struct {
	// Entry is the ledger entry (DeadLetter JSON, with its attempts).
	// Owner: worker (committed with the delivery's dead state, before
	// asynq archives the task), producer (replay marks it, delete removes
	// it). Lives until deleted, or for the dead-letter retention.
	Entry string
	// Attempts is the release before's list of a dead letter's attempts
	// (Attempt JSON). This release keeps the attempts in the entry itself
	// (copied from the delivery record as it dies): the list is only read,
	// for entries written before, and deleted with them.
	Attempts string
	// Index orders the subscriber's dead letters by time (score: Unix ms,
	// member: task id). Entries whose ledger entry is gone are dropped by
	// readers and trimmed past the retention.
	Index string
	// Claim is a string: the token of the replay (or resend) of the entry
	// under way, so that two at once book it once. Owner: producer. Lives
	// while that replay runs, at most a minute (one cut off by a crash).
	Claim string
}

// Ledger names the ledger keys of task id "<subscriber>:<event>", in slot
// {<subscriber>} with the rest of its subscriber's state. A task id of
// another form (a task hooklane did not write) goes to slot
// {<ns>:orphans}.
func (ns Keys) Ledger(taskID string) LedgerKeys {
	sub, ev, ok := SplitTaskID(taskID)
	if !ok {
		tag := string(ns) + ":{" + string(ns) + ":orphans}:"
		return LedgerKeys{Entry: tag + "dead:" + taskID, Attempts: tag + "attempts:" + taskID, Index: tag + "dead-index",
			Claim: tag + "replaying:" + taskID}
	}
	return LedgerKeys{Entry: ns.sub(sub, "dead:"+ev), Attempts: ns.sub(sub, "attempts:"+ev), Index: ns.DeadIndex(sub),
		Claim: ns.sub(sub, "replaying:"+ev)}
}

// DeadIndex is LedgerKeys.Index of subscriber sub.
func (ns Keys) DeadIndex(sub string) string { return ns.sub(sub, "dead-index") }

// AllDeadIndex orders every dead letter by time (score: Unix ms; member:
// task id). Its own slot: it is written just before the entry, so it may
// name an entry that does not exist (readers drop those), never miss one.
func (ns Keys) AllDeadIndex() string { return string(ns) + ":dead-letters" }

// Counters is a hash of namespace-wide counters (dropped:<reason>,
// ops:<type>) for what no longer has a subscriber to count under. Slot
// {<ns>:totals}, so that a worker's flush adds to it and Totals in one
// script, once. Owner: worker and producer. Lives forever.
func (ns Keys) Counters() string { return ns.Totals() + ":counters" }

// LegacyCounters is where the release before kept Counters (its own
// slot); `hooklane migrate` adds it to Counters once and deletes it.
func (ns Keys) LegacyCounters() string { return string(ns) + ":counters" }

// CounterDroppedDeleted counts (in Counters) the deliveries dropped unsent
// because their subscriber was deleted or created again.
const CounterDroppedDeleted = "dropped:deleted"

// Totals is a hash of the counters of every subscriber together, with the
// fields of Stats (see worker.ReadTotals): what /metrics exports without a
// subscriber label, at a cost that does not grow with the subscribers.
// Each worker process sums its runs' counts in memory and adds them here
// about once a second, so a delivery costs no command of its own for it.
// Slot {<ns>:totals}. Owner: worker. Lives forever.
func (ns Keys) Totals() string { return string(ns) + ":{" + string(ns) + ":totals}" }

// TenantTotals is a hash of registered tenant's counters: Totals' fields
// summed over its subscribers' runs, flushed with Totals. Slot
// {<ns>:totals}. Owner: worker (producer deletes it with its tenant).
// Lives until its tenant is deleted.
func (ns Keys) TenantTotals(tenant string) string { return ns.Totals() + ":tenant:" + tenant }

// TotalsFlushes is a hash: worker process → the number of its last flush
// added to Totals, so that a flush sent twice adds once. Slot
// {<ns>:totals}. Owner: worker. Lives an hour past the last flush.
func (ns Keys) TotalsFlushes() string { return ns.Totals() + ":flushes" }

// Cooling is a sorted set of the subscribers whose destination was sent a
// cooldown (a 429's Retry-After or backoff; score: its end, Unix ms in
// Redis' clock, the latest one), so /metrics counts the destinations
// cooling down now with one ZCOUNT. Each worker process adds its new
// cooldowns with one script about once a second, which also drops the
// ended ones. An entry may outlive its subscriber until its cooldown
// ends. Slot {<ns>:cooling}. Owner: worker. Entries live until their
// cooldown ends (and the next flush).
func (ns Keys) Cooling() string { return string(ns) + ":{" + string(ns) + ":cooling}" }

// TenantNames is a sorted set of every tenant's name but the default
// tenant's (which always is), all with score 0 so that ZRANGEBYLEX pages
// through them. Slot {<ns>:subs}. Owner: producer. An entry lives until
// its tenant is deleted.
func (ns Keys) TenantNames() string { return ns.dir("tenant-names") }

// Tenants is a hash: tenant name → its record (producer.Tenant JSON).
// Slot {<ns>:subs}. Owner: producer. An entry lives until its tenant is
// deleted, with everything it owns.
func (ns Keys) Tenants() string { return ns.dir("tenants") }

// Tokens is a hash: tenant token id → the token (producer.Token JSON,
// without its secret, with its secret's digest). Slot {<ns>:subs}. Owner: producer. An entry lives
// until the token is revoked or its tenant deleted.
func (ns Keys) Tokens() string { return ns.dir("tokens") }

// TokenDigests is a hash: the SHA-256 (hex) of a tenant token's secret →
// its id: what a request's token is looked up by. Slot {<ns>:subs}.
// Owner: producer. An entry goes with its token (whose record keeps the
// digest).
func (ns Keys) TokenDigests() string { return ns.dir("token-digests") }

// TenantTokens is the set of tenant's token ids. Slot {<ns>:subs}. Owner:
// producer. Lives while the tenant has a token.
func (ns Keys) TenantTokens(tenant string) string { return ns.dir("tokens:" + tenant) }

// TokensUsed is a hash: tenant token id → when it was last used (Unix ms,
// recorded at most once a minute per web process). Slot {<ns>:subs}.
// Owner: web. An entry goes with its token.
func (ns Keys) TokensUsed() string { return ns.dir("tokens-used") }

// TenantFlow counts a tenant's deliveries booked by publishes in the
// current second (a counter that expires a second after its first
// increment), which decides whether its next ones may take the fresh lane
// (producer.Config.TenantFreshRate). Slot {<ns>:subs}: the publish's
// match script adds to it. Owner: producer. Lives a second.
func (ns Keys) TenantFlow(tenant string) string { return ns.dir("tenant-flow:" + tenant) }

// PortalLink is a portal link's grant: the SHA-256 (hex) of its secret →
// "<tenant> <expiry, Unix ms>", expiring with it. Slot {<ns>:subs}. Owner:
// producer (CreatePortalLink writes it, RedeemPortalLink deletes it: a
// link opens one session).
func (ns Keys) PortalLink(digest string) string { return ns.dir("portal-link:" + digest) }

// PortalSession is a portal session: the SHA-256 (hex) of its cookie's
// secret → "<tenant> <expiry, Unix ms>", expiring with it (its link's
// expiry). Slot {<ns>:subs}. Owner: producer.
func (ns Keys) PortalSession(digest string) string { return ns.dir("portal-session:" + digest) }

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
// letters are due to be reported. Slot {<ns>:ops}, written just before the
// dead letter is committed (an entry with nothing to report is dropped).
// Owner: worker. A worker claims an entry by moving its score a lease
// ahead, and removes it only once the report is published: a worker that
// dies in between leaves it for the next after the lease.
func (ns Keys) DeadReportsDue() string { return string(ns) + ":{" + string(ns) + ":ops}:deaddue" }

// OpenBreakers is the set of subscribers whose circuit breaker is open, for
// /metrics' count (one SCARD). Slot {<ns>:subs}. Owner: worker (when a
// breaker opens or closes, after the gate record, which stays the truth a
// delivery reads), producer (deletion). An entry lives while the breaker is
// open.
func (ns Keys) OpenBreakers() string { return ns.dir("breakers_open") }

// Lanes of delivery queues. A subscriber's deliveries handed to asynq go
// to its fresh lane while fewer than its fresh share are there, the rest
// to the backlog lane. Each lane has asynq Servers of its own in every
// worker, so events of a subscriber with a small backlog never wait
// behind another's large one. (What cannot go yet waits in the
// subscriber's lot, not in asynq: see limits/doc.go.)
const (
	LaneFresh   = "fresh"
	LaneBacklog = "backlog"
)

// DefaultRegion names the region of subscribers without one in queue names
// and HOOKLANE_REGIONS.
const DefaultRegion = "default"

// DeliveryQueue is the asynq queue of the tasks of subscriber sub in lane,
// for a namespace whose queues are split in shards per lane and region.
// The shard is a hash of the id: stable, so a hand-out sent twice meets
// its first task in the same queue (asynq's task ids are unique per
// queue). asynq keeps each queue in slot {<queue>}: shards spread a
// Cluster's queue work over its masters.
func (ns Keys) DeliveryQueue(region, sub, lane string, shards int) string {
	return ns.ShardQueue(region, lane, Shard(sub, shards))
}

// ShardQueue is the asynq queue of one lane's shard in region ("" is
// DefaultRegion): "<ns>:<region>:fresh<shard>" or "…:backlog<shard>". The
// release before's queues were "<ns>:<region>:f<shard>" and "b<shard>"
// (LegacyQueue): its workers never take a task of this release.
func (ns Keys) ShardQueue(region, lane string, shard int) string {
	if region == "" {
		region = DefaultRegion
	}
	return string(ns) + ":" + region + ":" + lane + strconv.Itoa(shard)
}

// LegacyQueue is the queue of the release before for one lane's shard in
// region (lane LaneFresh or LaneBacklog): workers of this release adopt
// what it still holds.
func (ns Keys) LegacyQueue(region, lane string, shard int) string {
	if region == "" {
		region = DefaultRegion
	}
	return string(ns) + ":" + region + ":" + lane[:1] + strconv.Itoa(shard)
}

// QueueLane is the lane of delivery queue q of this release (LaneFresh,
// LaneBacklog), "" for any other queue.
func (ns Keys) QueueLane(q string) string {
	rest, ok := strings.CutPrefix(q, string(ns)+":")
	if !ok {
		return ""
	}
	region, shard, ok := strings.Cut(rest, ":")
	if !ok || (region != DefaultRegion && ValidateRegion(region) != nil) {
		return ""
	}
	for _, lane := range []string{LaneFresh, LaneBacklog} {
		if n, ok := strings.CutPrefix(shard, lane); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return lane
			}
		}
	}
	return ""
}

// OwnsQueue reports whether asynq queue q is one of the namespace's
// delivery queues, of this release or of the one before.
func (ns Keys) OwnsQueue(q string) bool {
	if ns.QueueLane(q) != "" {
		return true
	}
	region := ns.QueueRegion(q)
	shard, ok := strings.CutPrefix(q, string(ns)+":"+region+":")
	if region == "" || !ok || len(shard) < 2 || (shard[0] != 'f' && shard[0] != 'b') {
		return false
	}
	_, err := strconv.Atoi(shard[1:])
	return err == nil
}

// QueueRegion is the region of delivery queue q (of this release or the
// one before), "" for another queue.
func (ns Keys) QueueRegion(q string) string {
	rest, ok := strings.CutPrefix(q, string(ns)+":")
	if !ok {
		return ""
	}
	region, _, _ := strings.Cut(rest, ":")
	return region
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

// Ready is the region's ready index, a sorted set: subscriber id → when
// (Unix ms, Redis' clock) its schedule needs a dispatcher's turn next.
// Claimed is its claims: subscriber id → when the claim lapses. Both in
// slot {<ns>:ready:<region>}. Owner: worker (dispatchers claim and release
// turns) and producer and worker (anything that may let a parked delivery
// go sooner lowers its time: a publish, a resume, a freed slot, a closed
// breaker). An entry lives while its subscriber has something parked.
func (ns Keys) Ready(region string) string {
	if region == "" {
		region = DefaultRegion
	}
	return string(ns) + ":{" + string(ns) + ":ready:" + region + "}"
}

// Claimed is Ready's claims; see Ready.
func (ns Keys) Claimed(region string) string { return ns.Ready(region) + ":claimed" }

// Rescuer is the lease of the region's rescuer (worker/rescuer.go): the id
// of the worker that sweeps the region's subscribers now, for twice its
// interval. RescuerCursor is the last subscriber id its sweep looked at
// ("" or absent: from the start). Both in Ready's slot. Owner: worker.
// The lease lives until it lapses; the cursor as long as the namespace.
func (ns Keys) Rescuer(region string) string { return ns.Ready(region) + ":rescuer" }

// Serving says that a worker serves the region (its dispatcher runs):
// each worker serving it writes its id here every few seconds, to lapse a
// few seconds after the last one stopped (worker/serving.go). A slot of
// its own (read and written alone). Owner: worker; read by producers
// (producer/serving.go).
func (ns Keys) Serving(region string) string {
	if region == "" {
		region = DefaultRegion
	}
	return string(ns) + ":serving:" + region
}

// RescuerCursor is the region rescuer's place in its sweep; see Rescuer.
func (ns Keys) RescuerCursor(region string) string { return ns.Ready(region) + ":rescuer:cursor" }

// Layout is a hash describing the namespace's layout, written once by the
// first process that uses it: "version" (2) and "shards" (queues per lane
// and region). Its own slot. Every process reads it at start and refuses
// to run with another shard count.
func (ns Keys) Layout() string { return string(ns) + ":layout" }

// RegionSubscribers is a hash: region → how many subscribers name it
// (DefaultRegion for those without one). Slot {<ns>:subs}. Owner: producer
// (the transaction that writes or deletes a configuration moves its
// region's count; Migrate rebuilds it from the configurations), and
// workers serving every region, which serve its fields and delete a field
// whose count is 0 once that region's queues and ready index are empty
// (worker/regions.go). Its fields are at most producer.Config.MaxRegions.
// Lives as long as the namespace.
func (ns Keys) RegionSubscribers() string { return ns.dir("region-subs") }

// LegacyRegions is the release before's set of every region a subscriber
// ever named, never pruned. Slot {<ns>:subs}. Its workers read it; Migrate
// run again (after they are gone) deletes it.
func (ns Keys) LegacyRegions() string { return ns.dir("regions") }

// IngestLimiterKey is the key to give a redis_rate.Limiter (which
// prefixes it with "rate:") for the publish limit of one API token, named
// by a hash of the token, never the token. Slot {<ns>:ingest:<hash>}.
// Owner: web. Lives a second or so past the last publish (redis_rate's
// expiry).
func (ns Keys) IngestLimiterKey(tokenHash string) string {
	return string(ns) + ":{" + string(ns) + ":ingest:" + tokenHash + "}"
}

// TenantIngestLimiterKey is IngestLimiterKey for the publish limit of a
// tenant (its setting), whatever token publishes for it. Slot
// {<ns>:ingest-tenant:<tenant>}. Owner: web. Lives as IngestLimiterKey.
func (ns Keys) TenantIngestLimiterKey(tenant string) string {
	return string(ns) + ":{" + string(ns) + ":ingest-tenant:" + tenant + "}"
}

// ReplicationMark is a Pub/Sub channel, not a key: the producer publishes
// an empty message on it just before a WAIT (producer.Config.WaitReplicas),
// as the write that WAIT counts replicas for. Nothing is stored and no one
// subscribes.
func (ns Keys) ReplicationMark() string { return string(ns) + ":replicated" }

// LegacyLeftovers are the keys the release before kept per subscriber that
// this one no longer reads: its waiting index (which never expired) and
// its pacing cursor. Migrate deletes them; the cursors of not-before
// minutes ("pacing:nb:…") and the publish markers ("seen:…") expire by
// themselves.
func (ns Keys) LegacyLeftovers(id string) []string {
	return []string{ns.sub(id, "waiting"), ns.sub(id, "pacing")}
}

// AsynqQueueKeys are asynq's keys of queue q that hold its backlog (its own
// names, read only by the load harness, which counts its backlog with four
// cheap commands instead of asynq's Inspector).
func AsynqQueueKeys(q string) (pending, active, scheduled, retry string) {
	pfx := "asynq:{" + q + "}:"
	return pfx + "pending", pfx + "active", pfx + "scheduled", pfx + "retry"
}

// AsynqQueues is asynq's set of every queue a task was ever enqueued in
// (asynq's key, untagged: a slot of its own).
const AsynqQueues = "asynq:queues"

// AsynqTask is asynq's hash of one task (asynq's key, read only by tests
// that check the slot layout).
func (ns Keys) AsynqTask(queue, taskID string) string { return "asynq:{" + queue + "}:t:" + taskID }
