package ibtransport

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/pcapfile"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// connectX4LxCNP returns the IB part (BTH and the 16 reserved bytes) of
// the CNP a ConnectX-4 Lx sent (roce/testdata/hw-connectx4lx-cnp.pcap:
// Ethernet, IPv4 without options, UDP, then the IB packet and its ICRC).
func connectX4LxCNP(t *testing.T) []byte {
	f, err := os.Open("../roce/testdata/hw-connectx4lx-cnp.pcap")
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	require.NoError(t, err)
	p, err := rd.Next()
	require.NoError(t, err)
	const headers = 14 + 20 + 8
	require.Len(t, p.Data, headers+header.BTHLen+cnpReservedLen+header.ICRCLen)
	return append([]byte(nil), p.Data[headers:len(p.Data)-header.ICRCLen]...)
}

// TestCNPFromConnectXCapture replays the ConnectX-4 Lx CNP, addressed to
// the engine's QP (only the destination QPN changed): the QP's reaction
// point cuts its rate. The same CNP for an unknown QP or from another
// path is not handled.
func TestCNPFromConnectXCapture(t *testing.T) {
	cnp := connectX4LxCNP(t)
	var hw header.Packet
	require.NoError(t, header.ParsePacket(cnp, &hw))
	require.Equal(t, header.OpCNP, hw.Opcode())
	require.True(t, hw.BTH.BECN())
	require.Equal(t, uint32(0x118), hw.BTH.DestQPN())

	ft := newFuzzTarget(t)
	q := ft.qp
	require.Zero(t, q.CongestionRate())
	hw.BTH.SetDestQPN(q.QPN())
	ft.e.Receive(cnp, &RecvInfo{SGID: ibv.GID{9}})
	assert.Equal(t, uint64(1), ft.e.Ctr.RPCNPIgnored.Load(), "a CNP from another path")
	assert.Zero(t, q.CongestionRate())

	ft.e.Receive(cnp, &RecvInfo{SGID: peerGID})
	assert.Equal(t, uint64(1), ft.e.Ctr.RPCNPHandled.Load())
	line := ft.e.g.cc.LineRate
	assert.Equal(t, line/2, q.CongestionRate(), "the first cut: alpha 1, half the line rate")
	assert.Zero(t, ft.e.Ctr.RxUnsupported.Load())

	hw.BTH.SetDestQPN(q.QPN() + 1000)
	ft.e.Receive(cnp, &RecvInfo{SGID: peerGID})
	assert.Equal(t, uint64(1), ft.e.Ctr.RxNoQP.Load())
}

// TestCNPSentForCEMark checks the notification point: a request marked CE
// makes the QP send its peer a CNP laid out as the ConnectX-4 Lx's (BTH
// opcode 0x81, P_Key 0xFFFF, BECN, the peer's QPN, PSN 0, 16 zero bytes),
// ahead of the ACK; within the CNP interval further marks send none.
func TestCNPSentForCEMark(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.e.g.cc.CNPInterval = time.Hour
	ft.port.keep = true
	ft.port.sent = nil
	marked := RecvInfo{SGID: peerGID, CE: true}
	ft.e.Receive(ft.packet(header.OpRCSendOnly, 100, 10, nil), &marked)
	ft.e.Process()
	require.Len(t, ft.port.sent, 2, "a CNP and the ACK")
	want := connectX4LxCNP(t)
	var p header.Packet
	require.NoError(t, header.ParsePacket(want, &p))
	p.BTH.SetDestQPN(peerQPN)
	assert.Equal(t, want, ft.port.sent[0], "the CNP, byte for byte as ConnectX's but for the QPN")
	assert.Equal(t, header.OpRCAcknowledge, header.Opcode(ft.port.sent[1][0]))
	assert.Equal(t, uint64(1), ft.e.Ctr.NPECNMarked.Load())
	assert.Equal(t, uint64(1), ft.e.Ctr.NPCNPSent.Load())

	ft.port.sent = nil
	ft.e.Receive(ft.packet(header.OpRCSendOnly, 101, 10, nil), &marked)
	ft.e.Receive(ft.packet(header.OpRCSendOnly, 102, 10, nil), &marked)
	ft.e.Process()
	assert.Equal(t, uint64(3), ft.e.Ctr.NPECNMarked.Load())
	assert.Equal(t, uint64(1), ft.e.Ctr.NPCNPSent.Load(), "one CNP per interval")
	for _, pkt := range ft.port.sent {
		assert.NotEqual(t, header.OpCNP, header.Opcode(pkt[0]))
	}

	// An unmarked packet never makes a CNP.
	ft.e.g.cc.CNPInterval = 0
	ft.e.Receive(ft.packet(header.OpRCSendOnly, 103, 10, nil), &RecvInfo{SGID: peerGID})
	ft.e.Process()
	assert.Equal(t, uint64(1), ft.e.Ctr.NPCNPSent.Load())
}

// TestCNPBatchAtLineRate checks that the interval is measured on the
// marked packets' earliest arrival times at the line rate, not on the
// one clock reading of the pass that took them in: a batch of marked
// 4 KB packets at 10 Gb/s (3.3 µs each on the line) with a 4 µs interval
// gets a CNP for every second packet; at 100 Gb/s (0.33 µs each) one
// for every thirteenth; at 1 Gb/s one for each, but at most
// maxPendingCNPs wait at once.
func TestCNPBatchAtLineRate(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.e.g.cc.CNPInterval = 4 * time.Microsecond
	ft.e.g.cc.LineRate = 10e9
	ft.port.keep = true
	marked := RecvInfo{SGID: peerGID, CE: true}
	psn := header.PSN(10)
	batch := func(k, size int) uint64 {
		before := ft.e.Ctr.NPCNPSent.Load()
		for range k {
			ft.e.Receive(ft.packet(header.OpRCSendOnly, psn, size, nil), &marked)
			psn++
		}
		ft.e.Process()
		return ft.e.Ctr.NPCNPSent.Load() - before
	}
	// 4096 + 12 bytes of BTH + 46 on the wire: 3.3 µs at 10 Gb/s.
	assert.Equal(t, uint64(5), batch(10, 4096), "one CNP per two packets")
	ft.e.g.cc.LineRate = 100e9
	assert.Equal(t, uint64(2), batch(20, 4096), "one CNP per 13 packets")
	ft.e.g.cc.LineRate = 1e9
	assert.Equal(t, uint64(maxPendingCNPs), batch(40, 4096))
}
