// Package loadtest is hooklane's load harness: an adversarial receiver that
// hosts many subscriber endpoints on 127.0.0.1, an open-loop event
// generator, the scenarios of issue 4 (viral burst, spike ladder,
// throughput against a plain-asynq floor), a trickle of single events
// against the same floor, two tenants (one busy, one small) published
// together, and the report and chart of a run.
//
// It tests the system the way seed 000 asks, "like an adversary": the
// receiver enforces its own rate limits, answers 429 with Retry-After and
// bans a sender that comes back early, goes down, answers slowly, fails at
// random, and checks every signature. A run is judged invalid, not passed,
// when the generator or the receiver fell behind its own schedule (seed
// 003: "you measured the generator, not the endpoint").
//
// All traffic stays on 127.0.0.1, every loop is bounded in count and time,
// and a run stops by itself. `hooklane bench` runs it; the integration test
// runs a small version and asserts its invariants, that nothing could have
// hidden one (ScenarioReport.Hiding), and that the adversary acted.
package loadtest
