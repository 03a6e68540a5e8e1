package verify

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Colours of the chart.
var (
	chartBG      = color.RGBA{255, 255, 255, 255}
	chartGrant   = color.RGBA{46, 110, 190, 255}  // a grant's validity
	chartBelief  = color.RGBA{170, 190, 215, 255} // believed held past its validity
	chartFault   = color.RGBA{255, 214, 153, 255} // a fault's window
	chartOutside = color.RGBA{230, 230, 230, 255} // an Outside fault's window
	chartKill    = color.RGBA{0, 0, 0, 255}
	chartBad     = color.RGBA{220, 30, 30, 255}
	chartText    = color.RGBA{40, 40, 40, 255}
	chartGrid    = color.RGBA{225, 225, 225, 255}
)

// Layout of the chart, in pixels.
const (
	chartWidth, chartLeft, chartRight, chartTop, chartRow, chartBottom = 1400, 80, 20, 40, 18, 40
)

// WriteChart draws grants per worker over time, with fault windows shaded
// and violations marked, as a PNG.
func WriteChart(w io.Writer, h History, r Result) error {
	workers := 0
	t0, t1 := int64(math.MaxInt64), int64(math.MinInt64)
	for _, e := range h.Events {
		workers = max(workers, e.Worker+1)
		t0, t1 = min(t0, e.T), max(t1, e.T)
	}
	if workers == 0 || t1 <= t0 {
		t0, t1 = 0, 1
	}
	height := chartTop + workers*chartRow + chartBottom
	c := &chart{img: image.NewRGBA(image.Rect(0, 0, chartWidth, height)), t0: t0, t1: t1, height: height}
	draw.Draw(c.img, c.img.Bounds(), &image.Uniform{chartBG}, image.Point{}, draw.Src)

	// Seconds on the time axis.
	step := niceStep(time.Duration(t1 - t0))
	for t := int64(0); t <= t1-t0; t += int64(step) {
		px := c.x(t0 + t)
		c.fill(px, chartTop, px+1, height-chartBottom, chartGrid)
		c.text(px-10, height-chartBottom+15, fmt.Sprintf("%gs", time.Duration(t).Seconds()))
	}
	c.faults(h.Faults)
	for wk := 0; wk < workers; wk++ {
		c.text(8, rowY(wk)+13, fmt.Sprintf("worker %d", wk))
	}
	for _, g := range r.Grants {
		y := rowY(g.Worker)
		if g.Belief > g.End {
			c.fill(c.x(g.End), y+5, c.x(min(g.Belief, t1)), y+chartRow-5, chartBelief)
		}
		c.fill(c.x(g.Start), y+3, c.x(min(g.End, t1)), y+chartRow-3, chartGrant)
	}
	c.violations(r.Violations)
	c.text(chartLeft, 16, fmt.Sprintf("grants per worker (blue: valid; pale: believed after validity); faults shaded, kills black; violations red - %d grants, (a) %d (b) %d (c) %d",
		len(r.Grants), r.Count(CheckPromise), r.Count(CheckOrder), r.Count(CheckFence)))
	return png.Encode(w, c.img)
}

// chart is the image being drawn and its time axis, t0 to t1 (ns).
type chart struct {
	img    *image.RGBA
	t0, t1 int64
	height int
}

// x maps a time to a pixel column.
func (c *chart) x(t int64) int {
	t = max(c.t0, min(t, c.t1))
	return chartLeft + int(float64(t-c.t0)/float64(c.t1-c.t0)*float64(chartWidth-chartLeft-chartRight))
}

// rowY is the top of worker w's row.
func rowY(w int) int { return chartTop + w*chartRow }

// fill paints a rectangle at least one pixel wide.
func (c *chart) fill(x0, y0, x1, y1 int, col color.Color) {
	if x1 <= x0 {
		x1 = x0 + 1
	}
	draw.Draw(c.img, image.Rect(x0, y0, x1, y1), &image.Uniform{col}, image.Point{}, draw.Over)
}

func (c *chart) text(px, py int, s string) {
	d := font.Drawer{Dst: c.img, Src: &image.Uniform{chartText}, Face: basicfont.Face7x13, Dot: fixed.P(px, py)}
	d.DrawString(s)
}

// faults shades fault windows (a worker's row, or all rows) and marks kills.
func (c *chart) faults(fs []Fault) {
	for _, f := range fs {
		col := chartFault
		if f.Outside {
			col = chartOutside
		}
		y0, y1 := chartTop, c.height-chartBottom
		if f.Worker >= 0 {
			y0, y1 = rowY(f.Worker), rowY(f.Worker)+chartRow
		}
		if f.Kind == FaultKill {
			c.fill(c.x(f.Start)-1, y0, c.x(f.Start)+2, y1, chartKill)
			continue
		}
		c.fill(c.x(f.Start), y0, c.x(min(f.End, c.t1)), y1, col)
	}
}

// violations marks each labelled-inside violation with a red line, and the
// rows of the workers involved.
func (c *chart) violations(vs []Violation) {
	for _, v := range vs {
		if v.Check == CheckOverlap || v.Outside != "" {
			continue
		}
		px := c.x(v.T)
		c.fill(px-1, chartTop, px+2, c.height-chartBottom, chartBad)
		if v.Check != CheckFence {
			for _, wk := range []int{v.A.Worker, v.B.Worker} {
				if wk >= 0 {
					c.fill(px-4, rowY(wk)+4, px+5, rowY(wk)+chartRow-4, chartBad)
				}
			}
		}
	}
}

// niceStep picks a grid step that gives about ten lines.
func niceStep(d time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if d/s <= 12 {
			return s
		}
	}
	return 30 * time.Minute
}
