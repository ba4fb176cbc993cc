package main

import (
	"fmt"
	"strings"
)

// dcqcnChart draws each run's per-sender rates over time as an SVG: one
// panel per run, the bottleneck's rate dashed, the sum of both senders
// grey.
func dcqcnChart(runs []*dcqcnRun) []byte {
	const (
		w, panelH    = 900, 260
		left, right  = 60, 20
		top, bottom  = 30, 40
		maxRate      = 1.5e9
		seconds      = dcqcnSeconds + 1
		plotW, plotH = w - left - right, panelH - top - bottom
	)
	colors := [2]string{"#1f77b4", "#d62728"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, panelH*len(runs))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for p, r := range runs {
		y0 := p * panelH
		x := func(t float64) float64 { return left + t/seconds*plotW }
		y := func(v float64) float64 { return float64(y0+top) + plotH*(1-min(v, maxRate)/maxRate) }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14">%s: each sender's rate through the 1 Gb/s bottleneck (100 ms samples)</text>`+"\n", left, y0+18, r.name)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0+top, plotW, plotH)
		for v := 0.0; v <= maxRate; v += 0.25e9 {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.2f</text>`+"\n", left-5, y(v)+4, v/1e9)
		}
		for t := 0; t <= seconds; t += 2 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d s</text>`+"\n", x(float64(t)), y0+top+plotH+15, t)
		}
		fmt.Fprintf(&b, `<text x="12" y="%d" transform="rotate(-90 12 %d)">Gb/s</text>`+"\n", y0+top+plotH/2, y0+top+plotH/2)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="6 4"/>`+"\n", left, left+plotW, y(dcqcnBottleneck), y(dcqcnBottleneck))
		at, rate := r.rateSeries()
		sum := make([]float64, len(at))
		for i := range 2 {
			for k, v := range rate[i] {
				sum[k] += v
			}
		}
		line := func(vals []float64, color string, width float64) {
			var pts []string
			for k, v := range vals {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(at[k]), y(v)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", color, width, strings.Join(pts, " "))
		}
		line(sum, "#aaa", 1)
		for i := range 2 {
			line(rate[i], colors[i], 1.5)
		}
		f := r.figures()
		legend := []string{"sender 1", "sender 2", "sum"}
		lc := []string{colors[0], colors[1], "#aaa"}
		for i, l := range legend {
			lx := left + 10 + i*90
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n",
				lx, lx+20, y0+top+12, y0+top+12, lc[i], lx+25, y0+top+16, l)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">utilisation %.3f, Jain %.3f (1 s windows, mean), drops %d, delay p99 %.2f ms</text>`+"\n",
			left+plotW-8, y0+top+16, f.utilMean, f.jainMean, f.drops, f.delayP99)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}
