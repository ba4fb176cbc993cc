package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// series is one figure measured in rounds together with others.
type series struct {
	fig     *Figure
	measure func() (value float64, note string, err error)
	vals    []float64 // per round; NaN where the run failed
	notes   []string  // per round
	errs    []string
	dead    bool // timed out: not run again
}

// preparedBy makes se run prepare before each of its measurements (the
// daemons up or down, a mode set): the series of one round need different
// setups, in turn.
func preparedBy(prepare func() error, se *series) *series {
	measure := se.measure
	se.measure = func() (float64, string, error) {
		if err := prepare(); err != nil {
			return 0, "", err
		}
		return measure()
	}
	return se
}

// rounds measures every series s.repeat times, interleaved (a b c, a b c,
// ...), so that load coming and going on a shared machine falls on all of
// them alike. Each figure is the median of its runs, and the ratio of two
// figures of the same rounds is the median of the round-by-round ratios.
func (s *suite) rounds(list ...*series) {
	for r := range s.repeat {
		for _, se := range list {
			if se.dead {
				se.vals, se.notes = append(se.vals, math.NaN()), append(se.notes, "")
				continue
			}
			v, note, err := se.measure()
			if err != nil {
				se.vals, se.notes = append(se.vals, math.NaN()), append(se.notes, "")
				se.errs = append(se.errs, err.Error())
				se.dead = errors.Is(err, errTimeout)
				fmt.Printf("    round %d: %-50s failed: %v\n", r+1, se.fig.Name, err)
				continue
			}
			se.vals, se.notes = append(se.vals, v), append(se.notes, note)
			fmt.Printf("    round %d: %-50s %.3f %s\n", r+1, se.fig.Name, v, se.fig.Unit)
		}
	}
	s.settle(list...)
}

// settle turns each series' per-round values into its figure (the median,
// the runs in its note), pairs the ratios of series measured in the same
// rounds, and reports the figures.
func (s *suite) settle(list ...*series) {
	for _, se := range list {
		var ok []float64
		var figs []string
		for _, v := range se.vals {
			if !math.IsNaN(v) {
				ok = append(ok, v)
				figs = append(figs, fmtValue(v))
			}
		}
		f := se.fig
		if len(ok) == 0 {
			f.Err = fmt.Sprintf("%d runs failed: %s", len(se.errs), strings.Join(se.errs, "; "))
			continue
		}
		f.Value = medianBy(ok, func(v float64) float64 { return v })
		f.Note = "median of " + strings.Join(figs, ", ")
		if i := slices.Index(se.vals, f.Value); se.notes[i] != "" {
			f.Note += "; median run: " + se.notes[i]
		}
		if len(se.errs) > 0 {
			f.Note += fmt.Sprintf("; %d runs failed: %s", len(se.errs), strings.Join(se.errs, "; "))
		}
	}
	for _, a := range list {
		for _, b := range list {
			if a == b {
				continue
			}
			var ratios []float64
			for i := range a.vals {
				if x, y := a.vals[i], b.vals[i]; !math.IsNaN(x) && !math.IsNaN(y) && y > 0 {
					ratios = append(ratios, x/y)
				}
			}
			if len(ratios) > 0 {
				if a.fig.paired == nil {
					a.fig.paired = map[string]float64{}
				}
				a.fig.paired[b.fig.Key] = medianBy(ratios, func(v float64) float64 { return v })
			}
		}
	}
	for _, se := range list {
		s.report(se.fig)
	}
}
