package web

import (
	"context"
	"fmt"
	"time"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// The subscriber page's picture: its attempts of the last hour over time,
// one stacked bar per slice of the hour (delivered, 429, failed), drawn
// server-side as SVG from the delivery log, the only place hooklane keeps
// attempt times.
//
// What it reads: producer.Deliveries for the deliveries published in the
// last hour, newest first, at most n of them (default 100, ?chart= up to
// 500), then each one's record again with its attempts (GetDelivery). With
// ?span=deliveries it draws the last n deliveries instead, whenever they
// were published, from the oldest one's publish time to now.
// Redis cost per page: 2 HMGETs (the subscriber), 1 XREVRANGE, n HGETALLs
// (the page of records) and n HGETALLs (the records with their attempts):
// 2n+3 commands, 3 round trips plus n spread over 8 at a time, and replies
// of about 200 bytes per record plus each kept response body (up to the
// worker's HOOKLANE_RESPONSE_BODY_BYTES, 1 KiB by default, per attempt).
// Bounded by n, not by how many deliveries there are. The same records
// read once would halve it; producer.DeliveryQuery has no option to keep
// the attempts it reads.
//
// What it misses: attempts made within the hour for deliveries published
// before it (a long retry), since the log is ordered by publish time; and,
// when more than n were published in the hour, the older ones: the chart
// then starts at the oldest delivery it read, and says so.

const (
	chartWindow   = time.Hour
	chartBuckets  = 30
	chartDefaultN = 100
	chartMaxN     = 500
	// The drawing's geometry, in SVG user units.
	chartW, chartH = 640, 140
	chartLeft      = 36 // room for the y axis' labels
	chartTop       = 8
	chartPlotH     = 110
)

// outcomeChart is what chart.html draws.
type outcomeChart struct {
	W, H, Left, Top, PlotH, PlotW int
	Bottom                        int // y of the x axis
	From, To                      time.Time
	Bars                          []chartBar
	Ticks                         []chartTick
	Peak                          int
	Delivered, Throttled, Failed  int
	Read                          int  // deliveries read
	Capped                        bool // there may be more in the hour than read
	N                             int
	LastN                         bool // the last N deliveries, not the last hour
}

type chartBar struct {
	X, W  float64 // the slice's whole column, where its title shows on hover
	Segs  []chartSeg
	Title string
}

type chartSeg struct {
	X, Y, W, H float64
	Class      string // delivered, throttled, failed
}

type chartTick struct {
	X      float64
	Label  string
	Anchor string // SVG text-anchor: the ends' labels stay inside the drawing
}

// attemptClass sorts an attempt into the chart's three outcomes.
func attemptClass(a tasks.Attempt) string {
	switch {
	case a.Status >= 200 && a.Status < 300:
		return "delivered"
	case a.Status == 429:
		return "throttled"
	}
	return "failed" // another status, or no answer (Error)
}

// readChart draws subscriber sub's chart from its newest n deliveries of
// the last hour, or (lastN) its newest n.
func (c *console) readChart(ctx context.Context, p *producer.Producer, sub string, n int, lastN bool) (outcomeChart, error) {
	now := c.now().UTC()
	from := now.Add(-chartWindow)
	q := producer.DeliveryQuery{Since: from, Limit: n}
	if lastN {
		q.Since = time.Time{}
	}
	recs, next, err := p.Deliveries(ctx, sub, q)
	if err != nil {
		return outcomeChart{}, err
	}
	subs, ids := make([]string, len(recs)), make([]string, len(recs))
	for i, r := range recs {
		subs[i], ids[i] = sub, r.EventID
	}
	full, err := c.readDeliveries(ctx, p, subs, ids)
	if err != nil {
		return outcomeChart{}, err
	}
	ch := outcomeChart{Read: len(recs), Capped: next != "", N: n, LastN: lastN}
	if (ch.Capped || lastN) && len(recs) > 0 {
		from = recs[len(recs)-1].PublishedAt // newest first: the oldest read
	}
	var attempts []tasks.Attempt
	for _, d := range full {
		if d.Record != nil {
			attempts = append(attempts, d.Record.Attempts...)
		}
	}
	ch.draw(from, now, attempts)
	return ch, nil
}

// draw bins attempts into chartBuckets slices of [from, to).
func (ch *outcomeChart) draw(from, to time.Time, attempts []tasks.Attempt) {
	ch.W, ch.H, ch.Left, ch.Top, ch.PlotH = chartW, chartH, chartLeft, chartTop, chartPlotH
	ch.PlotW, ch.Bottom = chartW-chartLeft-4, chartTop+chartPlotH
	ch.From, ch.To = from, to
	span := to.Sub(from)
	if span <= 0 {
		span = time.Minute
	}
	type bucket struct{ delivered, throttled, failed int }
	buckets := make([]bucket, chartBuckets)
	for _, a := range attempts {
		if a.At.Before(from) {
			continue
		}
		i := min(int(a.At.Sub(from)*chartBuckets/span), chartBuckets-1) // a clock ahead of ours: the last slice
		switch attemptClass(a) {
		case "delivered":
			buckets[i].delivered++
			ch.Delivered++
		case "throttled":
			buckets[i].throttled++
			ch.Throttled++
		default:
			buckets[i].failed++
			ch.Failed++
		}
	}
	ch.Peak = 1
	for _, b := range buckets {
		ch.Peak = max(ch.Peak, b.delivered+b.throttled+b.failed)
	}
	slot := float64(ch.PlotW) / chartBuckets
	step := span / chartBuckets
	for i, b := range buckets {
		x := float64(ch.Left) + float64(i)*slot + 1
		y := float64(ch.Bottom)
		bar := chartBar{X: x, W: slot - 2, Title: fmt.Sprintf("%s–%s: %d delivered, %d × 429, %d failed",
			from.Add(time.Duration(i)*step).Format("15:04:05"), from.Add(time.Duration(i+1)*step).Format("15:04:05"),
			b.delivered, b.throttled, b.failed)}
		for _, s := range []struct {
			n     int
			class string
		}{{b.delivered, "delivered"}, {b.throttled, "throttled"}, {b.failed, "failed"}} {
			if s.n == 0 {
				continue
			}
			h := float64(s.n) / float64(ch.Peak) * float64(ch.PlotH)
			y -= h
			bar.Segs = append(bar.Segs, chartSeg{X: x, Y: y, W: slot - 2, H: h, Class: s.class})
		}
		ch.Bars = append(ch.Bars, bar)
	}
	layout := "15:04"
	if span < 10*time.Minute {
		layout = "15:04:05"
	}
	for _, t := range []struct {
		f      float64
		anchor string
	}{{0, "start"}, {0.5, "middle"}, {1, "end"}} {
		ch.Ticks = append(ch.Ticks, chartTick{X: float64(ch.Left) + t.f*float64(ch.PlotW),
			Label: from.Add(time.Duration(t.f * float64(span))).Format(layout), Anchor: t.anchor})
	}
}
