package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestUDReceive checks the UD receive path at the packet level: the GRH
// and payload land in the receive, a packet of the wrong service or Q_Key
// is dropped and counted.
func TestUDReceive(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.cq.wcs = nil
	ip4 := make([]byte, 20)
	for i := range ip4 {
		ip4[i] = byte(0x40 + i)
	}
	info := &RecvInfo{SGID: peerGID, NetHeader: ip4}
	send := func(op header.Opcode, dst *QP, qkey uint32, n int) {
		pkt := ft.packet(op, 5, n, func(p *header.Packet) {
			p.BTH.SetDestQPN(dst.QPN())
			if p.DETH != nil {
				p.DETH.SetQKey(qkey)
				p.DETH.SetSrcQP(peerQPN)
			}
			if p.ImmDt != nil {
				p.ImmDt.SetImm(0x01020304)
			}
			for i := range p.Payload {
				p.Payload[i] = byte(i)
			}
		})
		ft.e.Receive(pkt, info)
	}
	send(header.OpUDSendOnlyImm, ft.ud, fuzzQKey, 300)
	require.Len(t, ft.cq.wcs, 1)
	wc := ft.cq.wcs[0]
	// SL: the RoCE packet type, IPv4, as ConnectX's CQE has it.
	assert.Equal(t, ibv.WC{WRID: 10, Opcode: ibv.WCRecv, Flags: ibv.WCWithGRH | ibv.WCWithImm, ByteLen: ibv.GRHLen + 300, Imm: 0x01020304,
		QPN: ft.ud.QPN(), SrcQP: peerQPN, SL: ibv.RoCEPacketIPv4, NetworkHdrType: ibv.NetworkIPv4}, wc)
	mem := ft.whole[4096:]
	assert.Equal(t, make([]byte, 20), mem[:20])
	assert.Equal(t, ip4, mem[20:40])
	assert.Equal(t, byte(0), mem[40])
	assert.Equal(t, byte(255), mem[40+255])

	send(header.OpUDSendOnly, ft.ud, fuzzQKey+1, 10)
	assert.Equal(t, uint64(1), ft.e.Ctr.RxBadQKey.Load())
	send(header.OpUDSendOnly, ft.qp, fuzzQKey, 10)
	send(header.OpRCSendOnly, ft.ud, 0, 10)
	assert.Equal(t, uint64(2), ft.e.Ctr.RxWrongService.Load())
	require.Len(t, ft.cq.wcs, 1)
	assert.Equal(t, ibv.QPSRTS, ft.ud.State())
	assert.Equal(t, ibv.QPSRTS, ft.qp.State())

	// Over IPv6 the GRH is the IPv6 header as it came, and the SL says
	// IPv6 in ConnectX's encoding (1), not the kernel's NetworkIPv6 (3).
	ip6 := make([]byte, 40)
	for i := range ip6 {
		ip6[i] = byte(0x60 + i)
	}
	info.NetHeader = ip6
	send(header.OpUDSendOnly, ft.ud, fuzzQKey, 16)
	require.Len(t, ft.cq.wcs, 2)
	assert.Equal(t, ibv.WC{WRID: 11, Opcode: ibv.WCRecv, Flags: ibv.WCWithGRH, ByteLen: ibv.GRHLen + 16, QPN: ft.ud.QPN(), SrcQP: peerQPN,
		SL: ibv.RoCEPacketIPv6, NetworkHdrType: ibv.NetworkIPv6}, ft.cq.wcs[1])
	assert.Equal(t, ip6, mem[500:540])
	assert.Equal(t, []byte{0, 1, 2, 3}, mem[540:544])
}

func TestRoCEPacketType(t *testing.T) {
	assert.Equal(t, uint8(2), ibv.NetworkIPv4.RoCEPacketType())
	assert.Equal(t, uint8(1), ibv.NetworkIPv6.RoCEPacketType())
	assert.Equal(t, uint8(0), ibv.NetworkIB.RoCEPacketType())
}

// TestUDForwarded checks that a UD QP stays on the engine it was created
// on, and that a datagram arriving at another engine reaches it with its
// network header intact, though the frame it came in is reused at once.
func TestUDForwarded(t *testing.T) {
	ports := []*fakePort{{}, {}}
	g := NewGroup([]Port{ports[0], ports[1]}, []func(){func() {}, func() {}})
	for _, e := range g.Engines() {
		e.Exit()
	}
	mem := make([]byte, 4096)
	mr := newTestRegion(mem, 0x77, ibv.AccessAll)
	cq := &testCQ{}
	q := newUDTarget(t, g.Engines()[0], &testMemory{mr}, cq, mr)
	require.Equal(t, 0, q.EngineIndex())

	frame := make([]byte, 4200)
	var p header.Packet
	n, err := header.LayoutPacket(frame, header.OpUDSendOnly, 64, &p)
	require.NoError(t, err)
	p.BTH.SetDestQPN(q.QPN())
	p.DETH.SetQKey(fuzzQKey)
	p.DETH.SetSrcQP(peerQPN)
	ip6 := make([]byte, 40)
	for i := range ip6 {
		ip6[i] = byte(0x60 + i)
	}
	want := append([]byte(nil), ip6...)
	g.Engines()[1].Receive(frame[:n], &RecvInfo{SGID: peerGID, NetHeader: ip6})
	clear(ip6)
	clear(frame)
	require.Equal(t, uint64(1), g.Engines()[1].Ctr.Forwarded.Load())
	require.Empty(t, cq.wcs)
	g.Engines()[0].Process()
	require.Len(t, cq.wcs, 1)
	assert.Equal(t, ibv.WCSuccess, cq.wcs[0].Status)
	assert.Equal(t, ibv.NetworkIPv6, cq.wcs[0].NetworkHdrType)
	assert.Equal(t, uint32(ibv.GRHLen+64), cq.wcs[0].ByteLen)
	assert.Equal(t, want, mem[:ibv.GRHLen])
}

// TestUDAllocatesNothing checks a UD QP's packet path: posting a send,
// sending it, and receiving a datagram into a posted receive allocate
// nothing.
func TestUDAllocatesNothing(t *testing.T) {
	ft := newFuzzTarget(t)
	ah, err := ft.e.g.CreateAH(&ibv.AddressVector{DGID: peerGID})
	require.NoError(t, err)
	in := ft.packet(header.OpUDSendOnlyImm, 1, 200, func(p *header.Packet) {
		p.BTH.SetDestQPN(ft.ud.QPN())
		p.DETH.SetQKey(fuzzQKey)
		p.DETH.SetSrcQP(peerQPN)
	})
	info := &RecvInfo{SGID: peerGID, NetHeader: make([]byte, 20)}
	wr := ibv.SendWR{ID: 5, Opcode: ibv.WRSendWithImm, Flags: ibv.SendSignaled, SGL: []ibv.SGE{ft.mr.SGE(2000, 300)},
		AH: ah, RemoteQPN: peerQPN, RemoteQKey: fuzzQKey}
	recv := ibv.RecvWR{ID: 10, SGL: []ibv.SGE{ft.mr.SGE(0, 500)}}
	ft.cq.wcs = make([]ibv.WC, 0, 8)
	var postErr error
	steps, sent := 0, ft.e.Ctr.TxPackets.Load()
	step := func() {
		steps++
		if err := ft.ud.PostSend(&wr); err != nil {
			postErr = err
		}
		ft.e.Process()
		ft.e.Receive(in, info)
		if err := ft.ud.PostRecv(&recv); err != nil {
			postErr = err
		}
		ft.cq.wcs = ft.cq.wcs[:0]
	}
	step()
	assert.Zero(t, testing.AllocsPerRun(1000, step))
	require.NoError(t, postErr)
	assert.Equal(t, uint64(steps), ft.e.Ctr.TxPackets.Load()-sent, "one packet a step")
	assert.Zero(t, ft.e.Ctr.RxNoRecv.Load()+ft.e.Ctr.RxBadQKey.Load(), "every datagram received")
}
