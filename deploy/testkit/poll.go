package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond every 20ms until it holds, and fails the test with
// what it waited for once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Poll polls cond every 20ms until it holds (true) or timeout passes (false).
func Poll(timeout time.Duration, cond func() bool) bool {
	return PollEvery(timeout, 20*time.Millisecond, cond)
}

// PollEvery is Poll for a cond too costly to check every 20ms.
func PollEvery(timeout, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// Heavy skips a test under -short (`make test-short`, the developer's
// loop): one that starts processes, a Cluster or Sentinel set, a browser,
// or measures over seconds. why says which.
func Heavy(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}
