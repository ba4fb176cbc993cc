package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestDeviceCountersNames checks that the device's counters have unique
// names, start with rxe's, and include softnic's own from every layer.
func TestDeviceCountersNames(t *testing.T) {
	_, x, _ := connectedPair(t, memlink.Config{}, defaultOpts())
	cs := x.dev.DeviceCounters()
	seen := map[string]bool{}
	for _, c := range cs {
		require.False(t, seen[c.Name], "counter %s twice", c.Name)
		require.LessOrEqual(t, len(c.Name), counters.MaxName, c.Name)
		seen[c.Name] = true
	}
	for i, name := range verbs.RXECounters {
		require.Equal(t, name, cs[i].Name, "rxe's counters come first, in rxe's order")
	}
	for _, name := range []string{"rx_bad_icrc", "rx_good", "tx_nak_seq", "forwarded", "memlink_lost", "gsi_rx_mads",
		"cm_rx_req", "cm_retransmissions", "local_ack_timeout_err"} {
		assert.True(t, seen[name], "no counter %s", name)
	}
	_, ok := x.dev.QPCounters(0xffffff)
	assert.False(t, ok, "a QP that does not exist")
}

// TestQPCountersUnderLoss moves data over a clean link, then over one that
// loses requests: the QPs' and the devices' counters count the packets
// both ways, and the retransmissions, sequence NAKs and out-of-sequence
// requests only under loss.
func TestQPCountersUnderLoss(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		cfg := memlink.Config{Seed: 3, AtoB: memlink.Faults{Loss: loss}}
		o := defaultOpts()
		if loss == 0 {
			// No retransmit timer that a loaded machine could outrun: on
			// the clean link only a loss could start a recovery.
			o.timeout = 31
		}
		_, x, y := connectedPair(t, cfg, o)
		for i, op := range dataOps {
			transfer(t, x, y, op, 256<<10, byte(i))
		}
		qx, ok := x.dev.QPCounters(x.qp.QPN())
		require.True(t, ok)
		qy, ok := y.dev.QPCounters(y.qp.QPN())
		require.True(t, ok)
		get := func(cs []counters.Counter, name string) uint64 {
			v, ok := counters.Get(cs, name)
			require.True(t, ok, "no counter %s", name)
			return v
		}
		for _, cs := range [][]counters.Counter{qx, qy, x.dev.DeviceCounters(), y.dev.DeviceCounters()} {
			assert.NotZero(t, get(cs, "sent_pkts"))
			assert.NotZero(t, get(cs, "rcvd_pkts"))
		}
		assert.NotZero(t, get(qx, "sent_bytes"))
		assert.Equal(t, uint64(1), get(qx, "rdma_sends"), "one SEND")
		assert.Equal(t, uint64(1), get(qy, "rdma_recvs"), "one receive")
		recovery := get(qx, "completer_retry_err") + get(qx, "rcvd_seq_err") + get(qy, "out_of_seq_request") + get(qy, "tx_nak_seq")
		if loss == 0 {
			assert.Zero(t, recovery, "recovery without loss")
			assert.Zero(t, get(x.dev.DeviceCounters(), "completer_retry_err"))
			continue
		}
		assert.NotZero(t, get(qx, "completer_retry_err"), "retransmissions under loss")
		assert.NotZero(t, get(qy, "out_of_seq_request"), "out-of-sequence requests under loss")
		assert.NotZero(t, get(qy, "tx_nak_seq"), "sequence NAKs sent under loss")
		assert.NotZero(t, get(qx, "rcvd_seq_err"), "sequence NAKs received under loss")
		assert.GreaterOrEqual(t, get(x.dev.DeviceCounters(), "completer_retry_err"), get(qx, "completer_retry_err"))
	}
}
