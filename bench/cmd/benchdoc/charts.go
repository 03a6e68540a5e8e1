package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chart is a PNG drawn for the document.
type chart struct {
	file, title string
}

// barCharts are the bar charts: one bar per backend and library of one
// workload's figure.
var barCharts = []struct {
	file, workload, unit, title string
}{
	{"uncontended-p50.png", "Uncontended", "p50-µs", "Uncontended lock+unlock, p50 latency (µs, lower is better)"},
	{"uncontended-p99.png", "Uncontended", "p99-µs", "Uncontended lock+unlock, p99 latency (µs, lower is better)"},
	{"distinct.png", "DistinctNames", "ops/s", "32 goroutines on distinct names (ops/s)"},
	{"handoff-p99.png", "Contended", "handoff-p99-µs", "8 contenders: release to next grant, p99 (µs, lower is better)"},
	{"wait-p99.png", "Contended", "wait-p99-µs", "8 contenders: a waiter's wait, p99 (µs, lower is better)"},
	{"changes.png", "Contended", "changes/s", "8 contenders: owner changes/s"},
	{"changes64.png", "Contended64", "changes/s", "64 contenders: owner changes/s"},
}

// drawCharts draws the charts into dir and returns them.
func drawCharts(rs results, dir string) ([]chart, error) {
	var out []chart
	for _, bc := range barCharts {
		var labels []string
		var vals plotter.Values
		for _, r := range rs.list {
			if v, ok := r.metrics[bc.unit]; ok && r.workload == bc.workload {
				labels = append(labels, r.backend+" "+r.lib)
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			continue
		}
		logScale := strings.HasSuffix(bc.unit, "-µs") && slices.Min(vals) > 0
		if err := bars(filepath.Join(dir, bc.file), bc.title, labels, vals, logScale); err != nil {
			return out, err
		}
		out = append(out, chart{"bench/" + bc.file, bc.title})
	}
	ok, err := scale(rs, filepath.Join(dir, "herd.png"))
	if err != nil {
		return out, err
	}
	if ok {
		out = append(out, chart{"bench/herd.png", "Herd: release to next grant p99 by waiters (dlock)"})
	}
	return out, nil
}

// bars draws one horizontal bar per label; for latencies, which span
// orders of magnitude, one dot per label on a log scale (bars would start
// at 0, which a log scale does not have).
func bars(path, title string, labels []string, vals plotter.Values, logScale bool) error {
	p := plot.New()
	p.Title.Text = title
	if logScale {
		p.Title.Text += " (log scale)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{}
		pts := make(plotter.XYs, len(vals))
		for i, v := range vals {
			pts[i] = plotter.XY{X: v, Y: float64(i)}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = plotutil.Color(0)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		sc.GlyphStyle.Radius = vg.Points(4)
		p.Add(sc, plotter.NewGrid())
		p.X.Min, p.X.Max = slices.Min(vals)/2, slices.Max(vals)*2
	} else {
		b, err := plotter.NewBarChart(vals, vg.Points(10))
		if err != nil {
			return err
		}
		b.Horizontal = true
		b.Color = plotutil.Color(0)
		p.Add(b)
		p.X.Min = 0
	}
	p.NominalY(labels...)
	return p.Save(8*vg.Inch, vg.Length(len(labels))*16+vg.Inch, path)
}

// scale draws the Herd hand-off p99 against the number of waiters, one
// line per backend and library; it reports false when there is no Herd.
func scale(rs results, path string) (bool, error) {
	p := plot.New()
	p.Title.Text = "Herd: release to next grant, p99 (µs) by waiters"
	p.X.Label.Text = "waiters"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	series := map[string]plotter.XYs{}
	var names []string
	for _, r := range rs.list {
		size, ok := strings.CutPrefix(r.workload, "Herd/")
		n, err := strconv.Atoi(size)
		v, has := r.metrics["handoff-p99-µs"]
		if !ok || err != nil || !has {
			continue
		}
		name := r.backend + " " + r.lib
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		series[name] = append(series[name], plotter.XY{X: float64(n), Y: v})
	}
	if len(names) == 0 {
		return false, nil
	}
	for i, name := range names {
		l, err := plotter.NewLine(series[name])
		if err != nil {
			return false, fmt.Errorf("herd chart: %w", err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		p.Add(l)
		p.Legend.Add(name, l)
	}
	p.Legend.Top = true
	return true, p.Save(8*vg.Inch, 5*vg.Inch, path)
}
