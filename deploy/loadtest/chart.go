package loadtest

import (
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chart draws r's per-subscriber delivery rate (top) and backlog (bottom)
// per second into <name>.png beside the report. With many subscribers
// (the throughput scenario) it draws their sum instead.
func (e *env) chart(r *ScenarioReport) error {
	rate, backlog := plot.New(), plot.New()
	rate.Title.Text = r.Name + ": deliveries per second"
	rate.Y.Label.Text = "deliveries/s"
	backlog.Title.Text = r.Name + ": backlog (published, not yet delivered or dead)"
	backlog.Y.Label.Text = "events"
	backlog.X.Label.Text = "seconds since the scenario started"
	for _, p := range []*plot.Plot{rate, backlog} {
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
	}
	type line struct {
		name          string
		rate, backlog []float64
	}
	var lines []line
	if len(r.Subscribers) > 6 {
		sum := line{name: "all subscribers"}
		for _, s := range r.Subscribers {
			sum.rate, sum.backlog = addSeries(sum.rate, s.RatePerSec), addSeries(sum.backlog, s.Backlog)
		}
		lines = append(lines, sum)
	} else {
		for _, s := range r.Subscribers {
			lines = append(lines, line{s.ID, s.RatePerSec, s.Backlog})
		}
	}
	for i, l := range lines {
		for _, pl := range []struct {
			p *plot.Plot
			y []float64
		}{{rate, l.rate}, {backlog, l.backlog}} {
			ln, err := plotter.NewLine(xys(pl.y))
			if err != nil {
				return err
			}
			ln.Color = plotutil.Color(i)
			ln.Width = vg.Points(1.2)
			pl.p.Add(ln)
			pl.p.Legend.Add(l.name, ln)
		}
	}
	if len(r.Queue) > 0 {
		pts := make(plotter.XYs, len(r.Queue))
		for i, q := range r.Queue {
			pts[i] = plotter.XY{X: q.T, Y: float64(q.Backlog())}
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		ln.Color = color.Gray{Y: 80}
		ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		backlog.Add(ln)
		backlog.Legend.Add("queue (sampled)", ln)
	}
	const w, h = 11 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	plots := [][]*plot.Plot{{rate}, {backlog}}
	canvases := plot.Align(plots, tiles, dc)
	rate.Draw(canvases[0][0])
	backlog.Draw(canvases[1][0])
	name := r.Name + ".png"
	f, err := os.Create(filepath.Join(e.cfg.Out, name))
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	r.Chart = name
	return f.Close()
}

func xys(y []float64) plotter.XYs {
	pts := make(plotter.XYs, len(y))
	for i, v := range y {
		pts[i] = plotter.XY{X: float64(i) + 0.5, Y: v}
	}
	return pts
}

func addSeries(a, b []float64) []float64 {
	if len(a) < len(b) {
		a = append(a, make([]float64, len(b)-len(a))...)
	}
	for i, v := range b {
		a[i] += v
	}
	return a
}
