package loadtest

import (
	"strings"
	"testing"
)

// The CPU ratio sums Redis', the servers' and the receiver's CPU per
// delivery of each path's median round, and the summary prints it; with
// the servers' CPU unknown (in-process) there is none.
func TestCPURatioSumsEveryPartsCPU(t *testing.T) {
	path := func(redis, server, receiver float64) PathResult {
		return PathResult{Redis: RedisCost{CPUUsecPerDelivery: redis}, ServerCPU: server, HarnessCPU: receiver}
	}
	tp := Throughput{Floor: path(100, 300, 100), Hooklane: path(300, 400, 100)}
	if got := tp.Hooklane.CPU(); got != 800 {
		t.Fatalf("hooklane's CPU per delivery %.0f µs, want 300 + 400 + 100", got)
	}
	if got := path(300, 0, 100).CPU(); got != 0 {
		t.Fatalf("CPU per delivery %.0f µs with the servers' unknown, want 0 (unknown)", got)
	}
	if got := (&Throughput{Floor: path(100, 0, 100), Hooklane: path(300, 0, 100)}).cpuRatio(); got != 0 {
		t.Fatalf("CPU ratio %.2f in-process, want none", got)
	}
	tp.CPURatio = tp.cpuRatio()
	var b strings.Builder
	tp.summary(&b)
	if want := "hooklane 800 µs, floor 500 µs: 1.60× the floor's"; !strings.Contains(b.String(), want) {
		t.Fatalf("summary:\n%s\nwant a line with %q", b.String(), want)
	}
	tp.CPURatio = 0
	b.Reset()
	tp.summary(&b)
	if strings.Contains(b.String(), "CPU per delivery (") {
		t.Fatalf("summary without a CPU ratio:\n%s\nwant no CPU ratio line", b.String())
	}
}
