package web

import (
	"regexp"
	"strings"
	"testing"
)

// Every counter of /metrics (and the histograms summed over the same
// counters) says in its help text that it counts all-time, never reset,
// unlike the gauges beside them that say what is so now.
func TestAllTimeCountersSaySo(t *testing.T) {
	re := regexp.MustCompile(`fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)"`)
	n := 0
	for _, d := range allDescs {
		m := re.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		if strings.HasSuffix(m[1], "_total") || strings.HasSuffix(m[1], "_latency_seconds") || strings.HasSuffix(m[1], "_lateness_seconds") {
			n++
			if !strings.Contains(m[2], "all-time") {
				t.Errorf("%s: help %q does not say it is all-time", m[1], m[2])
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d counters found; want every *_total and the delivery histograms", n)
	}
}
