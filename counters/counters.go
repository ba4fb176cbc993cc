// Package counters names softnic's statistics the way Linux names an RDMA
// device's: a flat list of (name, value) pairs such as `sent_pkts 123`, as
// `rdma statistic show` prints them and rxe's hw_counters define them.
//
// The layers keep their counters as structs of atomics (ibtransport's
// Counters and QPCounters, roce's DeviceCounters, ...), each written by
// one goroutine at a time and read from anywhere. Append turns such a
// struct into named counters by reflection, off the packet path: a field
// tagged `rdma:"name"` takes that name (Linux's, where Linux has one), an
// untagged field its Go name in snake case, so a counter added to a struct
// shows up in `softnic stat` and the daemon's metrics with no change
// elsewhere. A field tagged `rdma:"-"` is left out.
package counters

import (
	"reflect"
	"strings"
	"sync/atomic"
	"unicode"
)

// Counter is one named value.
type Counter struct {
	Name  string
	Value uint64
}

// MaxName is the longest name a counter may have: the host interface
// carries names in fixed fields of this size (hostif.CounterRecord).
const MaxName = 40

var (
	atomicUint64 = reflect.TypeFor[atomic.Uint64]()
	atomicInt64  = reflect.TypeFor[atomic.Int64]()
)

// Append appends the counters of *v, a pointer to a struct, to dst: every
// exported field that is an atomic.Uint64, an atomic.Int64 or an integer,
// nested structs flattened (their fields' names stand alone), each name
// after prefix. Negative values read as 0.
func Append(dst []Counter, prefix string, v any) []Counter {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return dst
	}
	return appendStruct(dst, prefix, rv.Elem())
}

func appendStruct(dst []Counter, prefix string, v reflect.Value) []Counter {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("rdma")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name := tag
		if name == "" {
			name = SnakeCase(f.Name)
		}
		fv := v.Field(i)
		switch {
		case fv.Type() == atomicUint64:
			dst = append(dst, Counter{prefix + name, fv.Addr().Interface().(*atomic.Uint64).Load()})
		case fv.Type() == atomicInt64:
			dst = append(dst, Counter{prefix + name, nonNegative(fv.Addr().Interface().(*atomic.Int64).Load())})
		case fv.CanUint():
			dst = append(dst, Counter{prefix + name, fv.Uint()})
		case fv.CanInt():
			dst = append(dst, Counter{prefix + name, nonNegative(fv.Int())})
		case fv.Kind() == reflect.Struct:
			dst = appendStruct(dst, prefix+tag, fv)
		}
	}
	return dst
}

func nonNegative(v int64) uint64 { return uint64(max(v, 0)) }

// SnakeCase turns a Go field name into a counter name: RxBadICRC becomes
// rx_bad_icrc, TxNAKSeq tx_nak_seq.
func SnakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// Sum adds src's values to the counters of dst with the same names, and
// appends those dst lacks.
func Sum(dst, src []Counter) []Counter {
	idx := make(map[string]int, len(dst))
	for i, c := range dst {
		idx[c.Name] = i
	}
	for _, c := range src {
		if i, ok := idx[c.Name]; ok {
			dst[i].Value += c.Value
			continue
		}
		idx[c.Name] = len(dst)
		dst = append(dst, c)
	}
	return dst
}

// Get returns the value of the counter called name, and whether there is
// one.
func Get(cs []Counter, name string) (uint64, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}
