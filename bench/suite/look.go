package main

import "image/color"

// look holds what the table and chart call the run, its groups and its
// goals, for runs other than make bench's (bench-vm); zero fields mean
// make bench's.
type look struct {
	title   string       // chart header, before the date
	targets []Target     // the goals the table and chart evaluate
	legend  []legendItem // the chart's legend
	// kernelRef names what Figure.Kernel refers to in the chart's ratios.
	kernelRef string
}

type legendItem struct {
	name string
	col  color.RGBA
}

func (l look) chartTitle() string {
	if l.title == "" {
		return "softnic benchmark"
	}
	return l.title
}

func (l look) goals() []Target {
	if l.targets == nil {
		return targets
	}
	return l.targets
}

func (l look) legendItems() []legendItem {
	if l.legend == nil {
		return []legendItem{{"raw AF_XDP ceiling", colCeiling}, {"kernel TCP/UDP", colKernel}, {"softnic", colSoftnic},
			{"target met", colMet}, {"target missed", colMissed}}
	}
	return l.legend
}

func (l look) kernelWord() string {
	if l.kernelRef == "" {
		return "kernel"
	}
	return l.kernelRef
}
