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

// WriteChart draws grants per worker over time, with fault windows shaded
// and violations marked, as a PNG.
func WriteChart(w io.Writer, h History, r Result) error {
	const (
		width, left, right, top, row, bottom = 1400, 80, 20, 40, 18, 40
	)
	workers := 0
	t0, t1 := int64(math.MaxInt64), int64(math.MinInt64)
	for _, e := range h.Events {
		workers = max(workers, e.Worker+1)
		t0, t1 = min(t0, e.T), max(t1, e.T)
	}
	if workers == 0 || t1 <= t0 {
		t0, t1 = 0, 1
	}
	height := top + workers*row + bottom
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{chartBG}, image.Point{}, draw.Src)
	span := float64(t1 - t0)
	x := func(t int64) int {
		t = max(t0, min(t, t1))
		return left + int(float64(t-t0)/span*float64(width-left-right))
	}
	rowY := func(w int) int { return top + w*row }
	fill := func(x0, y0, x1, y1 int, c color.Color) {
		if x1 <= x0 {
			x1 = x0 + 1
		}
		draw.Draw(img, image.Rect(x0, y0, x1, y1), &image.Uniform{c}, image.Point{}, draw.Over)
	}
	text := func(px, py int, s string) {
		d := font.Drawer{Dst: img, Src: &image.Uniform{chartText}, Face: basicfont.Face7x13, Dot: fixed.P(px, py)}
		d.DrawString(s)
	}

	// Seconds on the time axis.
	step := niceStep(time.Duration(t1 - t0))
	for t := int64(0); t <= t1-t0; t += int64(step) {
		px := x(t0 + t)
		fill(px, top, px+1, height-bottom, chartGrid)
		text(px-10, height-bottom+15, fmt.Sprintf("%gs", time.Duration(t).Seconds()))
	}
	for _, f := range h.Faults {
		c := chartFault
		if f.Outside {
			c = chartOutside
		}
		y0, y1 := top, height-bottom
		if f.Worker >= 0 {
			y0, y1 = rowY(f.Worker), rowY(f.Worker)+row
		}
		if f.Kind == FaultKill {
			fill(x(f.Start)-1, y0, x(f.Start)+2, y1, chartKill)
			continue
		}
		fill(x(f.Start), y0, x(min(f.End, t1)), y1, c)
	}
	for wk := 0; wk < workers; wk++ {
		text(8, rowY(wk)+13, fmt.Sprintf("worker %d", wk))
	}
	for _, g := range r.Grants {
		y := rowY(g.Worker)
		if g.Belief > g.End {
			fill(x(g.End), y+5, x(min(g.Belief, t1)), y+row-5, chartBelief)
		}
		fill(x(g.Start), y+3, x(min(g.End, t1)), y+row-3, chartGrant)
	}
	for _, v := range r.Violations {
		if v.Check == CheckOverlap || v.Outside != "" {
			continue
		}
		px := x(v.T)
		fill(px-1, top, px+2, height-bottom, chartBad)
		if v.Check != CheckFence {
			for _, wk := range []int{v.A.Worker, v.B.Worker} {
				if wk >= 0 {
					fill(px-4, rowY(wk)+4, px+5, rowY(wk)+row-4, chartBad)
				}
			}
		}
	}
	text(left, 16, fmt.Sprintf("grants per worker (blue: valid; pale: believed after validity); faults shaded, kills black; violations red - %d grants, (a) %d (b) %d (c) %d",
		len(r.Grants), r.Count(CheckPromise), r.Count(CheckOrder), r.Count(CheckFence)))
	return png.Encode(w, img)
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
