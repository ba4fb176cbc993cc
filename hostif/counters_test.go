package hostif

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/counters"
)

// A query_counters reply has the size docs/HOST-INTERFACE.md gives,
// fits a control message, and pages a long list through.
func TestCountersReplyRoundTrip(t *testing.T) {
	require.Equal(t, 16, binary.Size(CountersRequest{}))
	require.Equal(t, 16+CountersPerReply*48, binary.Size(CountersReply{}))
	require.Equal(t, 4064, HeaderLen+binary.Size(CountersReply{}), "docs/HOST-INTERFACE.md's size")
	require.LessOrEqual(t, HeaderLen+binary.Size(CountersReply{}), MaxMessage)
	require.Equal(t, "query_counters", OpQueryCounters.String())

	var cs []counters.Counter
	for i := range 200 {
		cs = append(cs, counters.Counter{Name: counters.SnakeCase("Counter") + string(rune('a'+i%26)) + "_" + string(rune('0'+i/26)), Value: uint64(i) << 40})
	}
	cs[0].Name = "a_name_of_exactly_forty_bytes_1234567890"
	require.Len(t, cs[0].Name, counters.MaxName)
	buf := make([]byte, MaxMessage)
	var got []counters.Counter
	for from := uint32(0); ; {
		msg, err := Encode(buf, Header{Op: OpQueryCounters}, NewCountersReply(cs, from))
		require.NoError(t, err)
		var r CountersReply
		require.NoError(t, DecodeBody(msg, &r))
		got, err = DecodeCounters(got, &r, from)
		require.NoError(t, err)
		from += r.Count
		if r.Count < CountersPerReply {
			break
		}
	}
	require.Equal(t, cs, got)
}

func TestDecodeCountersRejects(t *testing.T) {
	good := NewCountersReply([]counters.Counter{{Name: "sent_pkts", Value: 1}}, 0)
	_, err := DecodeCounters(nil, &good, 0)
	require.NoError(t, err)
	for name, mutate := range map[string]func(r *CountersReply) uint32{
		"count over a reply":  func(r *CountersReply) uint32 { r.Count = CountersPerReply + 1; r.Total = 1000; return 0 },
		"count over total":    func(r *CountersReply) uint32 { r.Total = 0; return 0 },
		"from past total":     func(r *CountersReply) uint32 { return 1 },
		"empty name":          func(r *CountersReply) uint32 { r.Counter[0].Name = [counters.MaxName]byte{}; return 0 },
		"bytes after the NUL": func(r *CountersReply) uint32 { r.Counter[0].Name[30] = 'x'; return 0 },
		"upper case":          func(r *CountersReply) uint32 { r.Counter[0].Name[0] = 'S'; return 0 },
		"a control byte":      func(r *CountersReply) uint32 { r.Counter[0].Name[2] = '\n'; return 0 },
	} {
		r := good
		from := mutate(&r)
		_, err := DecodeCounters(nil, &r, from)
		require.ErrorIs(t, err, ErrMessage, name)
	}
}

// FuzzDecodeCounters decodes arbitrary reply bodies (the input, cut or
// padded with zeros to a reply's size, so that every input reaches the
// checks): a reply is accepted only with sane counts and names, and
// nothing panics.
func FuzzDecodeCounters(f *testing.F) {
	buf := make([]byte, MaxMessage)
	msg, err := Encode(buf, Header{Op: OpQueryCounters}, NewCountersReply([]counters.Counter{{Name: "sent_pkts", Value: 5}, {Name: "rx_bad_icrc", Value: 1}}, 0))
	require.NoError(f, err)
	f.Add(append([]byte{}, msg[HeaderLen:HeaderLen+16+2*48]...), uint32(0))
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0}, uint32(0))
	f.Add([]byte{200, 0, 0, 0, 84, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'a', 0xff}, uint32(116))
	body := make([]byte, binary.Size(CountersReply{}))
	f.Fuzz(func(t *testing.T, in []byte, from uint32) {
		clear(body)
		copy(body, in)
		var r CountersReply
		_, err := binary.Decode(body, binary.LittleEndian, &r)
		require.NoError(t, err)
		cs, err := DecodeCounters(nil, &r, from)
		if err != nil {
			require.ErrorIs(t, err, ErrMessage)
			return
		}
		require.Len(t, cs, int(r.Count))
		for _, c := range cs {
			require.NotEmpty(t, c.Name)
			require.LessOrEqual(t, len(c.Name), counters.MaxName)
		}
	})
}
