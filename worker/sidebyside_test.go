package worker_test

// The package's sequential tests are the ones that must not run beside
// the parallel tests' load (a flood, 20,000 waiting tasks, real
// processes). Those of them that can run beside each other are grouped
// here, each group one sequential test whose subtests are parallel: it
// runs alone among the sequential tests and is over before the parallel
// ones start.

import (
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// TestCrashesAndFailovers runs the tests that kill, stop or fail over
// real processes (hooklane workers, redis-servers, Sentinel sets) side by
// side, and not beside the package's other tests: it is not parallel, so
// it runs alone among the sequential tests (the timing tests among them)
// and is over before the parallel ones start. Its tests share no server
// and no namespace, and none measures a rate or a latency: their checks
// are "never before a deadline", "nothing lost, nothing twice" and
// bounds that waiting for the CPU does not reach (the killed probe's role
// ±1s, a shutdown within its timeout + 2s, a publish lost only within the
// second before a failover, a replica's WAIT within 100ms where it takes
// under 3ms). Side by side they take about as long as the longest (the
// Sentinel failover, ~16s) instead of the sum (~55s).
func TestCrashesAndFailovers(t *testing.T) {
	testkit.Heavy(t, "worker processes and Redis servers killed, stopped or failed over")
	sideBySide(t, []namedTest{
		{"SentinelFailover", sentinelFailover}, // the longest first
		{"SentinelWaitReplicas", sentinelWaitReplicas},
		{"KilledProbeLeavesTheBreakerRecoverable", killedProbeLeavesTheBreakerRecoverable},
		{"Kill9", kill9},
		{"SIGTERMDuringBurst", sigtermDuringBurst},
		{"RedisRestartDuringBurst", redisRestartDuringBurst},
		{"ShutdownOnTheLastAttemptIsNotAnAttempt", shutdownOnTheLastAttemptIsNotAnAttempt},
	})
}

// TestLimitWindows runs two in-process tests whose check is a limit's
// window (no more than burst + rate·t arrivals in any window, 50ms of
// slack) side by side: each is one worker in this process sending at 6 to
// 10 requests a second, a few percent of a core, so beside each other
// they stay far from the load that moves an arrival by 50ms; beside the
// parallel tests they would not. TestRateLimitHolds, a burst of 5 at
// 40/s, runs alone (its comment says why).
func TestLimitWindows(t *testing.T) {
	sideBySide(t, []namedTest{
		{"RateLimitPolicyCapsTheRate", rateLimitPolicyCapsTheRate},
		{"LimitChangeKeepsTheSpentBurst", limitChangeKeepsTheSpentBurst},
	})
}

type namedTest struct {
	name string
	run  func(t *testing.T)
}

// sideBySide runs tests as parallel subtests of t.
func sideBySide(t *testing.T, tests []namedTest) {
	for _, c := range tests {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}
