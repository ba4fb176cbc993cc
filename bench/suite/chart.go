package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Chart layout, in pixels.
const (
	chartWidth  = 1300
	labelWidth  = 490 // left column: figure names
	barWidth    = 420
	rowHeight   = 18
	panelGap    = 16
	headerLines = 2
	margin      = 10
)

var (
	colBackground = color.RGBA{255, 255, 255, 255}
	colText       = color.RGBA{20, 20, 20, 255}
	colGrid       = color.RGBA{200, 200, 200, 255}
	colCeiling    = color.RGBA{130, 130, 130, 255}
	colKernel     = color.RGBA{66, 120, 200, 255}
	colSoftnic    = color.RGBA{235, 130, 30, 255}
	colMet        = color.RGBA{60, 170, 80, 255}
	colMissed     = color.RGBA{210, 60, 50, 255}
)

// chartRow is one bar.
type chartRow struct {
	label string
	value float64 // bar length in the panel's scale
	text  string  // printed after the bar
	col   color.RGBA
	mark  float64 // a vertical line at this value (0: none)
	err   bool
}

type chartPanel struct {
	title string
	rows  []chartRow
	scale float64 // value at the right end of the bar area
	log   bool    // logarithmic bars from 1 to scale
}

// chart draws every figure, one panel per unit, and the targets as
// fractions of their goal.
func (s *suite) chart() ([]byte, error) {
	var panels []chartPanel
	for _, unit := range []string{unitGbps, unitMBps, unitMpps, unitUsec, unitKiB} {
		if p := s.unitPanel(unit); len(p.rows) > 0 {
			panels = append(panels, p)
		}
	}
	panels = append(panels, s.targetPanel())
	img := s.drawChart(panels)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unitPanel has a bar for each figure in unit, with its ratios to the
// ceiling and the kernel.
func (s *suite) unitPanel(unit string) chartPanel {
	// Latency tails are 100 times the medians: a log scale shows both.
	p := chartPanel{title: unitTitle(unit), log: unit == unitUsec}
	for _, f := range s.res.Figures {
		if f.Unit != unit {
			continue
		}
		r := chartRow{label: f.Name, value: f.Value, col: groupColor(f.Group)}
		if f.Err != "" {
			r.err, r.text = true, "not measured: "+f.Err
		} else {
			r.text = fmt.Sprintf("%s %s", fmtValue(f.Value), f.Unit) + s.ratioText(f, f.Ceiling, "ceil.") + s.ratioText(f, f.Kernel, s.look.kernelWord())
		}
		p.rows = append(p.rows, r)
	}
	return p
}

// ratioText is "  <ratio>x what" of f to ref, or nothing without one.
func (s *suite) ratioText(f *Figure, ref, what string) string {
	if ref == "" {
		return ""
	}
	v, ok := s.res.Ratio(f.Key, ref)
	if !ok {
		return ""
	}
	return fmt.Sprintf("  %.2fx %s", v, what)
}

// targetPanel shows each target as the share of its goal reached.
func (s *suite) targetPanel() chartPanel {
	t := chartPanel{title: "Targets: share of the goal reached (line = goal met; capped at 2)", scale: 2}
	for _, tg := range s.look.goals() {
		o := s.res.Evaluate(tg)
		r := chartRow{label: tg.Name, mark: 1}
		if !o.Measured {
			r.err, r.text = true, "not measured: "+o.Why
		} else {
			r.value = achievement(o)
			r.col = colMissed
			if o.Met {
				r.col = colMet
			}
			if tg.Ref == "" {
				r.text = fmtValue(o.Value)
			} else {
				r.text = fmtValue(o.Value) + "x"
			}
		}
		t.rows = append(t.rows, r)
	}
	return t
}

// drawChart draws the header, the legend and the panels one below another.
func (s *suite) drawChart(panels []chartPanel) *image.RGBA {
	height := margin + headerLines*rowHeight
	for _, p := range panels {
		height += (len(p.rows)+1)*rowHeight + panelGap
	}
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBackground}, image.Point{}, draw.Src)
	y := margin + rowHeight
	drawText(img, margin, y, fmt.Sprintf("%s %s  (%s)", s.look.chartTitle(), s.started.Format("2006-01-02 15:04 UTC"), s.env.kernelAndCPUs()), colText)
	y += rowHeight
	drawLegend(img, margin, y, s.look.legendItems())
	for _, p := range panels {
		y = drawPanel(img, y, p)
	}
	return img
}

// drawPanel draws p's title and bars below y and returns the y under it.
func drawPanel(img *image.RGBA, y int, p chartPanel) int {
	y += panelGap
	drawText(img, margin, y, p.title, colText)
	y += 4
	scale := p.barScale()
	x0 := margin + labelWidth
	for _, r := range p.rows {
		top := y + 2
		drawText(img, margin, y+rowHeight-4, clip(r.label, labelWidth/7-1), colText)
		if r.err {
			drawText(img, x0, y+rowHeight-4, clip(r.text, (chartWidth-x0-margin)/7), colMissed)
			y += rowHeight
			continue
		}
		w := int(math.Min(r.value, scale) / scale * barWidth)
		if p.log {
			w = int(math.Log10(math.Max(1, math.Min(r.value, scale))) / math.Log10(math.Max(scale, 10)) * barWidth)
		}
		fill(img, image.Rect(x0, top, x0+w, top+rowHeight-4), r.col)
		if r.mark > 0 {
			mx := x0 + int(r.mark/scale*barWidth)
			fill(img, image.Rect(mx, top-2, mx+2, top+rowHeight-2), colText)
		}
		drawText(img, x0+barWidth+6, y+rowHeight-4, clip(r.text, (chartWidth-x0-barWidth-margin-6)/7), colText)
		y += rowHeight
	}
	fill(img, image.Rect(x0, y+2, x0+barWidth, y+3), colGrid)
	return y + rowHeight/2
}

// barScale is the value at the right end of p's bars: its own scale, or
// a little above its largest measured value.
func (p chartPanel) barScale() float64 {
	if p.scale != 0 {
		return p.scale
	}
	scale := 0.0
	for _, r := range p.rows {
		if !r.err {
			scale = math.Max(scale, r.value)
		}
	}
	if scale <= 0 {
		scale = 1
	}
	return scale * 1.05
}

// achievement is how far a target is reached: 1 means exactly at the
// bound, more is better, for both kinds of bound.
func achievement(o Outcome) float64 {
	switch {
	case !o.AtMost:
		return o.Value / o.Bound
	case o.Bound == 0:
		if o.Value == 0 {
			return 1
		}
		return 0
	case o.Value <= 0:
		return 2
	}
	return o.Bound / o.Value
}

func unitTitle(unit string) string {
	switch unit {
	case unitGbps:
		return "Bandwidth, Gb/s (RDMA payload; ceilings: frames/s x IB MTU)"
	case unitMBps:
		return "Bandwidth, MB/s (RDMA payload, as perftest reports it)"
	case unitMpps:
		return "Message / frame rate, millions per second"
	case unitUsec:
		return "Latency, microseconds (lower is better; log scale)"
	case unitKiB:
		return "Memory per idle QP, KiB (lower is better)"
	}
	return unit
}

func groupColor(g string) color.RGBA {
	switch g {
	case groupCeiling:
		return colCeiling
	case groupKernel:
		return colKernel
	}
	return colSoftnic
}

func drawLegend(img *image.RGBA, x, y int, items []legendItem) {
	for _, l := range items {
		fill(img, image.Rect(x, y-10, x+12, y), l.col)
		drawText(img, x+16, y, l.name, colText)
		x += 16 + 7*len(l.name) + 20
	}
}

func (e runEnv) kernelAndCPUs() string {
	return fmt.Sprintf("%d CPUs, Linux %s, commit %s", e.cpus, e.kernel, e.commit)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

// drawText writes s with its baseline at y; the basic font has ASCII and
// Latin-1 only, so comparison signs are spelled out.
func drawText(img *image.RGBA, x, y int, s string, c color.RGBA) {
	s = strings.NewReplacer("≥", ">=", "≤", "<=", "×", "x", "—", "-", "µ", "u").Replace(s)
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func clip(s string, n int) string {
	r := []rune(s)
	if n < 1 {
		return ""
	}
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "~"
}
