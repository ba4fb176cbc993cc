package counters

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type inner struct {
	Good    atomic.Uint64
	NotRoCE atomic.Uint64 `rdma:"not_roce"`
}

type sample struct {
	RxPackets  atomic.Uint64 `rdma:"rcvd_pkts"`
	RxBadICRC  atomic.Uint64
	Gauge      atomic.Int64
	Plain      uint32
	Negative   int
	Hidden     uint64 `rdma:"-"`
	Rx         inner  `rdma:"rx_"`
	Flat       inner
	List       []uint64 // slices are not counters
	unexported atomic.Uint64
}

func TestAppend(t *testing.T) {
	var s sample
	s.RxPackets.Store(7)
	s.RxBadICRC.Store(2)
	s.Gauge.Store(-5)
	s.Plain, s.Negative, s.Hidden = 3, -1, 9
	s.Rx.Good.Store(11)
	s.Flat.NotRoCE.Store(4)
	s.unexported.Store(1)
	got := Append([]Counter{{"first", 1}}, "p_", &s)
	want := []Counter{{"first", 1}, {"p_rcvd_pkts", 7}, {"p_rx_bad_icrc", 2}, {"p_gauge", 0}, {"p_plain", 3},
		{"p_negative", 0}, {"p_rx_good", 11}, {"p_rx_not_roce", 0}, {"p_good", 0}, {"p_not_roce", 4}}
	assert.Equal(t, want, got)
	assert.Empty(t, Append(nil, "", struct{ A uint64 }{1}), "a struct, not a pointer to one")
	assert.Empty(t, Append(nil, "", new(int)))
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{"RxBadICRC": "rx_bad_icrc", "TxNAKSeq": "tx_nak_seq", "BadIPHeader": "bad_ip_header",
		"RxNoQP": "rx_no_qp", "Retransmits": "retransmits", "RxUCOpSeq": "rx_uc_op_seq", "IDMismatch": "id_mismatch", "A": "a"} {
		assert.Equal(t, want, SnakeCase(in), in)
	}
}

func TestSumAndGet(t *testing.T) {
	a := []Counter{{"x", 1}, {"y", 2}}
	a = Sum(a, []Counter{{"y", 3}, {"z", 4}})
	require.Equal(t, []Counter{{"x", 1}, {"y", 5}, {"z", 4}}, a)
	v, ok := Get(a, "y")
	assert.True(t, ok)
	assert.Equal(t, uint64(5), v)
	_, ok = Get(a, "w")
	assert.False(t, ok)
}
