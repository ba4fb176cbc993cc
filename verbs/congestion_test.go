package verbs_test

import (
	"encoding/binary"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// ipv4At is where the IPv4 header starts in memlink's untagged frames.
const ipv4At = 14

// markCE sets the ECN field of an IPv4 frame to CE (11) and fixes the
// header checksum, as a congested router does; it returns the ECN field
// the frame had.
func markCE(frame []byte) uint8 {
	ip := frame[ipv4At : ipv4At+20]
	was := ip[1] & 3
	ip[1] |= 3
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return was
}

// congestedPair connects two QPs whose devices use cc, the link from A
// to B marking every frame CE. It returns what the taps saw: the ECN
// fields of A's frames and the IP TOS of B's CNPs.
type congestedPair struct {
	x, y     *endpoint
	mu       sync.Mutex
	dataECN  map[uint8]int
	cnpTOS   map[uint8]int
	cnpBytes []byte // the IB part (BTH onwards) of one CNP
}

func newCongestedPair(t *testing.T, ccA, ccB ibtransport.CongestionConfig) *congestedPair {
	la, lb := memlink.Pair(memlink.Config{})
	a, b := openPair(t, la, lb, verbs.Config{Congestion: ccA}, verbs.Config{Congestion: ccB})
	o := defaultOpts()
	cp := &congestedPair{x: newEndpoint(t, a, nil, o, nil), y: newEndpoint(t, b, nil, o, nil),
		dataECN: map[uint8]int{}, cnpTOS: map[uint8]int{}}
	connect(t, cp.x, cp.y, o)
	la.SetTap(func(frame []byte) bool {
		was := markCE(frame)
		cp.mu.Lock()
		cp.dataECN[was]++
		cp.mu.Unlock()
		return true
	})
	lb.SetTap(func(frame []byte) bool {
		ib := frame[ipv4At+20+8:]
		if header.Opcode(ib[0]) == header.OpCNP {
			cp.mu.Lock()
			cp.cnpTOS[frame[ipv4At+1]]++
			cp.cnpBytes = append(cp.cnpBytes[:0], ib...)
			cp.mu.Unlock()
		}
		return true
	})
	return cp
}

// TestCongestionNotificationAndReaction runs WRITEs over a link that marks
// every data frame CE: the frames leave ECT(0), the receiver answers with
// CNPs (DSCP 48, ECT(0)), the sender handles them and its QP becomes rate
// limited below the line rate, and the data still arrives whole.
func TestCongestionNotificationAndReaction(t *testing.T) {
	cc := ibtransport.CongestionConfig{LineRate: 10e9}
	cp := newCongestedPair(t, cc, cc)
	for i := range 4 {
		transfer(t, cp.x, cp.y, verbs.WRRDMAWrite, 256*1024, byte(i))
	}
	sender, receiver := cp.x.dev.Counters(), cp.y.dev.Counters()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	assert.NotZero(t, cp.dataECN[2], "A's frames leave ECT(0)")
	assert.Len(t, cp.dataECN, 1, "every frame of A's leaves ECT(0): %v", cp.dataECN)
	assert.NotZero(t, receiver.NPECNMarked.Load())
	require.NotZero(t, receiver.NPCNPSent.Load())
	assert.LessOrEqual(t, receiver.NPCNPSent.Load(), receiver.NPECNMarked.Load())
	assert.Equal(t, map[uint8]int{0xc2: int(receiver.NPCNPSent.Load())}, cp.cnpTOS, "CNPs leave DSCP 48, ECT(0)")
	want := make([]byte, 12+16+4)
	want[0], want[2], want[3], want[4] = 0x81, 0xff, 0xff, 0x40
	binary.BigEndian.PutUint32(want[4:], 0x40<<24|cp.x.qp.QPN())
	assert.Equal(t, want[:28], cp.cnpBytes[:28], "CNP: opcode 0x81, P_Key 0xFFFF, BECN, the sender's QPN, 16 zero bytes")
	assert.Len(t, cp.cnpBytes, 32, "BTH, 16 reserved bytes and the ICRC")
	assert.Equal(t, receiver.NPCNPSent.Load(), sender.RPCNPHandled.Load(), "every CNP handled")
	assert.Zero(t, sender.RPCNPIgnored.Load())
	rate := cp.x.qp.CongestionRate()
	assert.NotZero(t, rate, "the sender's QP is rate limited")
	assert.Less(t, rate, cc.LineRate)
	cs, ok := cp.x.dev.QPCounters(cp.x.qp.QPN())
	require.True(t, ok)
	i := slices.IndexFunc(cs, func(c counters.Counter) bool { return c.Name == "rp_current_rate_mbps" })
	require.GreaterOrEqual(t, i, 0, "softnic stat --qp shows the QP's rate")
	assert.NotZero(t, cs[i].Value)
	assert.Less(t, cs[i].Value, cc.LineRate/1e6)
}

// TestCongestionSwitchedOff checks both switches: a receiver with its
// notification point off sends no CNP for marked packets, and a sender
// with its reaction point off counts the CNPs it gets as ignored.
func TestCongestionSwitchedOff(t *testing.T) {
	t.Run("NPOff", func(t *testing.T) {
		cp := newCongestedPair(t, ibtransport.CongestionConfig{}, ibtransport.CongestionConfig{NPOff: true})
		transfer(t, cp.x, cp.y, verbs.WRRDMAWrite, 64*1024, 1)
		r := cp.y.dev.Counters()
		assert.NotZero(t, r.NPECNMarked.Load())
		assert.Zero(t, r.NPCNPSent.Load())
		assert.Zero(t, cp.x.qp.CongestionRate())
	})
	t.Run("RPOff", func(t *testing.T) {
		cp := newCongestedPair(t, ibtransport.CongestionConfig{RPOff: true}, ibtransport.CongestionConfig{})
		transfer(t, cp.x, cp.y, verbs.WRRDMAWrite, 64*1024, 2)
		s := cp.x.dev.Counters()
		require.NotZero(t, cp.y.dev.Counters().NPCNPSent.Load())
		assert.Equal(t, cp.y.dev.Counters().NPCNPSent.Load(), s.RPCNPIgnored.Load())
		assert.Zero(t, s.RPCNPHandled.Load())
		assert.Zero(t, cp.x.qp.CongestionRate())
	})
}
