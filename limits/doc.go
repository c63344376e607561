// Package limits holds hooklane's per-destination limits and the Redis
// scripts that keep every delivery's state: the schedule a delivery waits
// in until its destination can take it, the gates it passes just before
// its request (GCRA rate limit from github.com/go-redis/redis_rate,
// Retry-After cooldown, max in flight, circuit breaker, effective rate),
// and the commit of its outcome. It also parses Retry-After and the IETF
// rate-limit headers.
//
// # One way to park
//
// A delivery that cannot go now — its subscriber is paused or disabled,
// its breaker is open, its destination cools down after a 429, its rate
// or in-flight slots are spent, its not-before time or its backoff is
// ahead — is parked in its subscriber's lot, whatever the reason, and is
// not in asynq at all. A dispatcher (worker/dispatch.go) hands it to asynq
// when its destination can take it: Turn moves due deliveries from the lot
// to asynq's pending list at the subscriber's effective rate, never more
// than its in-flight slots can carry (max in flight, plus what may wait a
// slot in a worker for MaxWait: max in flight × MaxWait ÷ the observed
// latency by Little's law, within the worker's waiting room), nothing
// while it is paused, cooling down or its breaker open but one probe at a
// time. So a parked delivery is never run
// just to look again: holding costs nothing per interval, a wake (resume, a
// closed breaker, a changed limit, a freed slot, an ended cooldown) is one
// write to the ready index, and each delivery is then handed out once, at
// the pace its destination allows. A delivery that can go at once when it
// is published skips the lot (Book's fast path), so a healthy destination
// costs nothing extra.
//
// The dispatcher learns which subscribers need a turn from the ready index
// of their region: anything that may let a parked delivery go sooner
// lowers the subscriber's time there (ZADD LT), after the state that needs
// it is committed; a dispatcher claims due subscribers with a lease, runs
// their turns and gives each its next time (the next due delivery, the
// next rate slot, the cooldown's end, the next probe, the earliest
// horizon), keeping any earlier time written meanwhile. A worker that runs
// a delivery writes its outcome and the ready index before asynq lets the
// task go (a failed ready write fails the run: asynq keeps the task), so
// one that dies in between leaves the task to asynq's lease recovery, and
// the rerun, which Admit tells the lot entry's time, writes it again.
//
// # Always somewhere that moves it
//
// Every delivery record that has not ended (delivered, dead) is in
// exactly one of these places, each a sorted set of its subscriber's slot
// scored by when the delivery must move next:
//
//   - lot: parked, with exp (its horizon); moved at its due time by a turn;
//   - out: handed to asynq and not yet taken; its lease (OutLease) runs
//     out and a turn hands it out again (asynq refuses a second task of the
//     id while the first exists: only a lost task is replaced);
//   - runs: taken by a run (Admit), until its slot lapses; a turn then
//     looks at its record: still owned by a live slot, it waits again;
//     owned by a run that died and held nowhere else, it is handed out
//     again, and its next run counts the lost request;
//
// and, beside the last two, in an asynq task or a live run. Every script
// that takes a delivery out of one place puts it in another in the same
// step (Book: lot or out; Turn: lot to out; Admit: out or lot to runs;
// Park and Commit: runs to lot, or to out for an interrupted run, or
// nowhere once it ended), so no crash between two steps leaves it in none.
// A turn drops an entry of out or runs whose delivery has ended, whose
// record is gone or is another generation's.
//
// A place moves a delivery only through its subscriber's turn, so a
// subscriber with anything in lot, out or runs always has a turn due or
// claimed in its region's ready index: a turn gives its next time from
// all of them, and every step that may need a turn sooner writes it after
// its script, unless a turn asked no later has yet to run (the gate's ta:
// lua.go's asked; such a turn runs after the script and sees what it
// wrote). What a crash or a lost reply can still lose is that last
// write (a publish whose process dies after its booking); the region's
// rescuer (worker/rescuer.go) sweeps the subscribers (a cursor over their
// ids, one read-only script each, never a keyspace SCAN) and gives a turn
// to any whose earliest time is more than 5 s past with none claimed or
// due within those 5 s (rescue.go says when its lot counts). It and the turns count what they move in
// hooklane_rescued_total{reason}.
//
// # One owner per fact
//
// Each delivery has one record (tasks.Keys.Delivery) that says where it is
// and everything about it: generation, type, times, horizon, attempt
// budget, state, attempts, and which run owns it. A task in asynq carries
// only the record's name (tasks.Delivery), or several of one subscriber's
// (a batch, worker/batch.go: each of them admitted and committed on its
// own). Every script that moves a
// delivery checks the record first and moves it only from where it is:
// Admit takes it only if no live run owns it, Commit applies an outcome
// only for the run that owns it, once (a script sent again by a retry
// finds its token committed and changes nothing), and nothing moves a
// record back from delivered or dead.
//
// # Keys
//
// Per subscriber, all in its slot {<subscriber id>} (tasks.Keys.Gates):
//
//	gate      hash: generation, config version, pause, breaker (b_*), effective
//	          rate and its 2xx window (a_*), observed latency (lt), the cooldown an operator last
//	          ended (ce_at, ce_until), a resume no turn has seen yet (wk),
//	          the turn a booking, Admit or commit asked of the ready index
//	          that no turn has answered yet (ta: lua.go's asked).
//	          Until the subscriber is deleted.
//	cooldown  Unix ms before which nothing is sent. Until its end + 1 min.
//	inflight  zset run token → slot expiry. Each slot lives the request timeout
//	          + MaxWait + 5 s at most; the key a second longer.
//	gcra      redis_rate's GCRA state (its theoretical arrival time). As long
//	          as the limiter remembers (redis_rate's own expiry).
//	lot       zset event id → earliest hand-out (Unix ms): the parked
//	          deliveries. An entry lives until handed out or taken; its
//	          horizon (exp) bounds it.
//	retry     set of the parked deliveries a request was made for (the
//	          record's n > 0): status counts them as retrying, the rest of
//	          the lot as scheduled. A member lives as long as its lot entry:
//	          every script that puts a delivery in the lot files it here or
//	          not (lot_kind), every one that takes it out removes it.
//	exp       zset event id → horizon (Unix ms) of each parked delivery: a
//	          turn hands out those past it to be dead-lettered, even while
//	          the subscriber is held.
//	out       zset event id → lease end: deliveries handed to asynq and not
//	          yet taken by a run. Lease 2 min: a turn hands out again one
//	          whose lease ended (asynq refuses a second task of the id while
//	          the first exists).
//	runs      zset event id → the end of its run's slot: deliveries a run
//	          took (Admit) and has not committed. An entry leaves with the
//	          commit, a park, or a turn that finds its run dead.
//	fresh     zset event id → next look: deliveries in the fresh lane (at
//	          most FreshMax). An entry leaves when its run's outcome is
//	          committed (or it is parked or dropped); every FreshTTL it is
//	          looked at and kept while its record says it is still in the
//	          fresh lane, so a task waiting there long still counts, and one
//	          lost (Redis' data, a task deleted by hand) frees its place.
//	          The key lives while it has an entry.
//	d:<event> the delivery record (tasks.DeliveryRecord). Until due +
//	          horizon + dedup window; ended, at least the dedup window.
//	log       stream of the deliveries in publish order. As long as the
//	          longest record it lists, and at most 10 min more (a booking
//	          that lengthens it adds 10 min, so the next need not).
//	stats, dead:<event>, replaying:<event>, dead-index, opsdead,
//	          opsdead:ids: counters, dead letters and their replays' claims
//	          (tasks/keys.go).
//
// Per region, in slot {<ns>:ready:<region>}: ready (zset subscriber → next
// turn, Unix ms) and its claims (zset subscriber → claim end); an entry
// lives while its subscriber has something parked or handed out.
//
// Times are compared in Redis' clock (TIME) in every script, in
// milliseconds, so a not-before time or a Retry-After deadline is never
// passed early and workers on skewed hosts agree; no deadline waits in
// asynq's whole-second schedule.
//
// # Probes
//
// While a breaker is open, a turn hands out one parked delivery at each
// probe time, marked as the probe (the oldest parked first). A failed
// probe spends no attempt — the failure is the endpoint's, not the
// event's — and goes back to the lot behind the others, so deliveries take
// turns and none can die of probing; an outage dead-letters a delivery
// only once its own horizon has passed.
package limits
