package hostif

import (
	"bytes"
	"fmt"

	"github.com/softnic/softnic/counters"
)

// Bodies of query_counters, which a connection may send without hello, as
// `rdma statistic show` reads a kernel device's counters without opening
// it: the device's counters, or one QP's, as (name, value) records.
// Names travel with the values, so a daemon that counts more than its
// client knows of is still read whole.
type (
	// CountersRequest asks for the device's counters, or with Flags
	// CountersOfQP those of QP QPN, from the From'th on: a reply holds at
	// most CountersPerReply of them, and the next request continues from
	// From plus the reply's Count.
	CountersRequest struct {
		Flags, QPN, From, Reserved uint32
	}
	// CounterRecord is one counter: its name, NUL-padded, and its value.
	CounterRecord struct {
		Name  [counters.MaxName]byte
		Value uint64
	}
	// CountersReply holds Count records, the From'th to the
	// (From+Count-1)'th of the Total counters there are.
	CountersReply struct {
		Total, Count, Reserved, Reserved2 uint32
		Counter                           [CountersPerReply]CounterRecord
	}
)

// CountersOfQP is CountersRequest's flag for a QP's counters; without it
// the request is for the device's.
const CountersOfQP = 1

// CountersPerReply is how many counter records a query_counters reply
// holds: as many as fit a control message.
const CountersPerReply = 84

// NewCountersReply fills a reply with the counters of cs from the from'th
// on, as many as fit.
func NewCountersReply(cs []counters.Counter, from uint32) CountersReply {
	r := CountersReply{Total: uint32(len(cs))}
	for int(from) < len(cs) && r.Count < CountersPerReply {
		c := cs[from]
		rec := &r.Counter[r.Count]
		copy(rec.Name[:], c.Name)
		rec.Value = c.Value
		r.Count++
		from++
	}
	return r
}

// DecodeCounters checks a query_counters reply and returns its counters,
// appended to dst. A reply whose counts disagree, or a name that is empty,
// not NUL-padded, or has bytes other than lower-case letters, digits and
// underscores is ErrMessage: nothing a daemon sends is printed or served
// as a metric without this check.
func DecodeCounters(dst []counters.Counter, r *CountersReply, from uint32) ([]counters.Counter, error) {
	if r.Count > CountersPerReply || uint64(from)+uint64(r.Count) > uint64(r.Total) {
		return dst, fmt.Errorf("%w: %d counters from %d of %d", ErrMessage, r.Count, from, r.Total)
	}
	for i := range r.Count {
		rec := &r.Counter[i]
		name, err := counterName(rec.Name[:])
		if err != nil {
			return dst, err
		}
		dst = append(dst, counters.Counter{Name: name, Value: rec.Value})
	}
	return dst, nil
}

// counterName checks a NUL-padded name field.
func counterName(b []byte) (string, error) {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		n = len(b)
	}
	if n == 0 || len(bytes.Trim(b[n:], "\x00")) != 0 {
		return "", fmt.Errorf("%w: counter name %q", ErrMessage, b)
	}
	for _, c := range b[:n] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "", fmt.Errorf("%w: counter name %q", ErrMessage, b[:n])
		}
	}
	return string(b[:n]), nil
}
