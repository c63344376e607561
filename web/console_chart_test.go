package web

import (
	"testing"
	"time"

	"github.com/hooklane/hooklane/tasks"
)

// The chart puts each attempt in the slice of its time, in its colour: 2xx
// delivered, 429 throttled, anything else (another status, no answer)
// failed; attempts before the window are left out, and the bars' heights
// are to the tallest's scale.
func TestChartBinsAttempts(t *testing.T) {
	from := time.Date(2026, 7, 11, 8, 0, 0, 0, time.UTC)
	to := from.Add(30 * time.Minute) // 30 slices of a minute
	at := func(m float64) time.Time { return from.Add(time.Duration(m * float64(time.Minute))) }
	var ch outcomeChart
	ch.draw(from, to, []tasks.Attempt{
		{At: at(-1), Status: 200}, // before the window
		{At: at(0.5), Status: 200}, {At: at(0.6), Status: 204}, {At: at(0.7), Status: 429}, {At: at(0.8), Status: 500},
		{At: at(10.2), Error: "connection refused"},
		{At: at(31), Status: 200}, // a clock ahead: the last slice
	})
	if ch.Delivered != 3 || ch.Throttled != 1 || ch.Failed != 2 || ch.Peak != 4 || len(ch.Bars) != chartBuckets {
		t.Fatalf("delivered %d, throttled %d, failed %d, peak %d, %d bars; want 3, 1, 2, 4, %d",
			ch.Delivered, ch.Throttled, ch.Failed, ch.Peak, len(ch.Bars), chartBuckets)
	}
	classes := func(b chartBar) (out []string) {
		for _, s := range b.Segs {
			out = append(out, s.Class)
		}
		return out
	}
	if got := classes(ch.Bars[0]); len(got) != 3 || got[0] != "delivered" || got[1] != "throttled" || got[2] != "failed" {
		t.Errorf("first slice %v; want delivered, throttled, failed stacked", got)
	}
	first := ch.Bars[0].Segs
	if h := first[0].H + first[1].H + first[2].H; h != float64(ch.PlotH) || first[0].H != 2*first[1].H {
		t.Errorf("first slice heights %v; want the full plot (the peak), delivered twice the 429", first)
	}
	if first[2].Y+first[2].H != first[1].Y || first[0].Y+first[0].H != float64(ch.Bottom) {
		t.Errorf("segments not stacked from the axis up: %+v", first)
	}
	if got := classes(ch.Bars[10]); len(got) != 1 || got[0] != "failed" {
		t.Errorf("slice 10: %v; want one failed (no answer)", got)
	}
	if got := classes(ch.Bars[29]); len(got) != 1 || got[0] != "delivered" {
		t.Errorf("last slice: %v; want the attempt from a clock ahead", got)
	}
	for i, b := range ch.Bars {
		if i != 0 && i != 10 && i != 29 && len(b.Segs) != 0 {
			t.Errorf("slice %d: %v; want empty", i, classes(b))
		}
	}
}
