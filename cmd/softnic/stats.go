package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/softnic/softnic/internal/cpupin"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

// printSoftnicStats prints, one "name value" line each, the transport
// engine's counters, the RoCE device's frame counters and, on an AF_XDP
// link, the XDP program's and each socket's ring statistics: the losses a
// run met and how the engine recovered, next to its figures.
func printSoftnicStats(w io.Writer, dev *verbs.Device) {
	if dev.Remote() {
		fmt.Fprintln(w, " softnic: the device is the daemon's; its counters are there")
		return
	}
	fmt.Fprintln(w, " softnic engine counters:")
	writeCounters(w, "", reflect.ValueOf(dev.Counters()).Elem())
	fmt.Fprintln(w, " softnic RoCE device counters:")
	fmt.Fprintf(w, "engines %d\n", dev.RoCE().Engines())
	writeCounters(w, "", reflect.ValueOf(dev.RoCE().Counters()).Elem())
	fmt.Fprintln(w, " softnic threads kept on one CPU (engines, the tools' polling loops):")
	writeCounters(w, "Pin", reflect.ValueOf(&cpupin.Stats).Elem())
	type statser interface {
		Stats() (xdplink.Stats, error)
	}
	if l, ok := dev.RoCE().Link().(statser); ok {
		fmt.Fprintln(w, " softnic XDP link statistics:")
		st, err := l.Stats()
		writeCounters(w, "", reflect.ValueOf(&st).Elem())
		if err != nil {
			fmt.Fprintf(w, " (incomplete: %v)\n", err)
		}
	}
}

var atomicUint64Type = reflect.TypeFor[atomic.Uint64]()

// writeCounters prints every exported integer (or atomic.Uint64) field of
// the struct v, descending into nested structs and slices of them with
// dotted names, so that counters added later show without changes here.
func writeCounters(w io.Writer, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := prefix + f.Name
		if f.Anonymous {
			name = prefix
		}
		writeCounter(w, name, v.Field(i))
	}
}

func writeCounter(w io.Writer, name string, fv reflect.Value) {
	switch {
	case fv.Type() == atomicUint64Type:
		fmt.Fprintf(w, "  %-28s %d\n", name, fv.Addr().Interface().(*atomic.Uint64).Load())
	case fv.CanUint():
		fmt.Fprintf(w, "  %-28s %d\n", name, fv.Uint())
	case fv.CanInt():
		fmt.Fprintf(w, "  %-28s %d\n", name, fv.Int())
	case fv.Kind() == reflect.Struct:
		if name != "" && !strings.HasSuffix(name, ".") {
			name += "."
		}
		writeCounters(w, name, fv)
	case fv.Kind() == reflect.Slice:
		for j := range fv.Len() {
			writeCounter(w, fmt.Sprintf("%s[%d]", name, j), fv.Index(j))
		}
	}
}
