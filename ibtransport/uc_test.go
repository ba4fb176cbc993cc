package ibtransport

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// newUCTarget creates a UC QP in RTS on e, connected to peerQPN at MTU
// 256, expecting PSN 100 and sending from PSN 500, with four receives of
// 1000 bytes in mr (IDs 20 to 23).
func newUCTarget(t testing.TB, e *Engine, mem Memory, cq CompletionQueue, mr *testRegion) *QP {
	q, err := e.CreateQP(&QPConfig{Memory: mem, SendCQ: cq, RecvCQ: cq, Type: ibv.QPTypeUC, Cap: ibv.QPCap{MaxSendWR: 8, MaxRecvWR: 4}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, Port: 1, AccessFlags: ibv.AccessRemoteWrite},
		ibv.QPAttrState|ibv.QPAttrPKeyIndex|ibv.QPAttrPort|ibv.QPAttrAccessFlags))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, RQPSN: 100,
		AV: ibv.AddressVector{DGID: peerGID}}, ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 500}, ibv.QPAttrState|ibv.QPAttrSQPSN))
	for i := range 4 {
		require.NoError(t, q.PostRecv(&ibv.RecvWR{ID: uint64(20 + i), SGL: []ibv.SGE{mr.SGE(i*1000, 1000)}}))
	}
	return q
}

// ucFeed sends crafted UC packets to the fuzz target's UC QP.
type ucFeed struct {
	ft   *fuzzTarget
	info *RecvInfo
}

func newUCFeed(t *testing.T) *ucFeed {
	ft := newFuzzTarget(t)
	ft.cq.wcs = nil
	ft.port.keep = true
	ft.port.sent = nil
	return &ucFeed{ft: ft, info: &RecvInfo{SGID: peerGID}}
}

// send delivers a UC packet of n payload bytes of value fill at psn; a
// RETH names va (an offset in the region) and length, with rkey.
func (f *ucFeed) send(op header.Opcode, psn header.PSN, n int, fill byte, rkey uint32, off uint64, length uint32) {
	pkt := f.ft.packet(op, psn, n, func(p *header.Packet) {
		p.BTH.SetDestQPN(f.ft.uc.QPN())
		p.BTH.SetAckReq(false)
		if p.RETH != nil {
			p.RETH.SetVA(f.ft.mr.Addr() + off)
			p.RETH.SetRKey(rkey)
			p.RETH.SetDMALength(length)
		}
		if p.ImmDt != nil {
			p.ImmDt.SetImm(0xabcd)
		}
		for i := range p.Payload {
			p.Payload[i] = fill
		}
	})
	f.ft.e.Receive(pkt, f.info)
	f.ft.e.Process()
}

// expectMessage checks the one completion, of receive 20, for a 300-byte
// message with immediate whose first packet (256 bytes of first) and last
// (of last) landed at off in the region.
func (f *ucFeed) expectMessage(t *testing.T, op ibv.WCOpcode, off int, first, last byte) {
	t.Helper()
	require.Len(t, f.ft.cq.wcs, 1)
	assert.Equal(t, ibv.WC{WRID: 20, Opcode: op, ByteLen: 300, Flags: ibv.WCWithImm, Imm: 0xabcd,
		QPN: f.ft.uc.QPN(), SrcQP: peerQPN}, f.ft.cq.wcs[0])
	mem := f.ft.whole[4096+off:]
	assert.Equal(t, []byte{first, last, last}, []byte{mem[255], mem[256], mem[299]})
}

func (f *ucFeed) sendOp(op header.Opcode, psn header.PSN, n int, fill byte) {
	f.send(op, psn, n, fill, 0, 0, 0)
}

// TestUCPSNGapDropsMessage: a gap in the middle of a SEND drops exactly
// that message; the packets after it are dropped until the next FIRST or
// ONLY, which fills the same receive afresh.
func TestUCPSNGapDropsMessage(t *testing.T) {
	f := newUCFeed(t)
	ctr := &f.ft.e.Ctr
	f.sendOp(header.OpUCSendFirst, 100, 256, 1)
	f.sendOp(header.OpUCSendMiddle, 101, 256, 1)
	f.sendOp(header.OpUCSendLast, 103, 10, 1) // 102 lost
	assert.Equal(t, uint64(1), ctr.RxUCPSNGap.Load())
	f.sendOp(header.OpUCSendLast, 104, 10, 1)
	assert.Equal(t, uint64(1), ctr.RxUCResync.Load())
	assert.Empty(t, f.ft.cq.wcs, "the dropped message completes nothing")

	f.sendOp(header.OpUCSendFirst, 110, 256, 2)
	f.sendOp(header.OpUCSendLastImm, 111, 44, 3)
	f.expectMessage(t, ibv.WCRecv, 0, 2, 3)
	f.sendOp(header.OpUCSendOnly, 112, 5, 4)
	require.Len(t, f.ft.cq.wcs, 2)
	assert.Equal(t, uint64(21), f.ft.cq.wcs[1].WRID)
	assert.Empty(t, f.ft.port.sent, "UC never answers")
	assert.Equal(t, ibv.QPSRTS, f.ft.uc.State())
}

// TestUCOpcodeSequence: a MIDDLE or LAST with no message in progress, a
// WRITE packet inside a SEND and a FIRST inside a message each drop the
// message in progress.
func TestUCOpcodeSequence(t *testing.T) {
	f := newUCFeed(t)
	ctr := &f.ft.e.Ctr
	f.sendOp(header.OpUCSendMiddle, 100, 256, 1)
	assert.Equal(t, uint64(1), ctr.RxUCOpSeq.Load())
	f.sendOp(header.OpUCSendFirst, 100, 256, 1)
	f.sendOp(header.OpUCWriteLast, 101, 10, 1)
	assert.Equal(t, uint64(2), ctr.RxUCOpSeq.Load())
	f.sendOp(header.OpUCSendFirst, 102, 256, 1)
	f.sendOp(header.OpUCSendFirst, 103, 256, 5) // abandons the message of 102
	assert.Equal(t, uint64(3), ctr.RxUCOpSeq.Load())
	f.sendOp(header.OpUCSendLast, 104, 1, 6)
	require.Len(t, f.ft.cq.wcs, 1)
	assert.Equal(t, uint32(257), f.ft.cq.wcs[0].ByteLen)
	assert.Equal(t, uint64(20), f.ft.cq.wcs[0].WRID)
	// A FIRST shorter than the MTU breaks the message.
	f.sendOp(header.OpUCSendFirst, 105, 100, 1)
	assert.Equal(t, uint64(1), ctr.RxUCLength.Load())
	assert.Equal(t, ibv.QPSRTS, f.ft.uc.State())
	assert.Empty(t, f.ft.port.sent)
}

// TestUCWrite: a WRITE with a bad rkey or out of bounds is dropped and
// counted without touching memory; WRITE_WITH_IMM consumes a receive.
func TestUCWrite(t *testing.T) {
	f := newUCFeed(t)
	ctr := &f.ft.e.Ctr
	key := f.ft.mr.RKey()
	f.send(header.OpUCWriteOnly, 100, 64, 7, key+1, 0, 64)
	f.send(header.OpUCWriteFirst, 101, 256, 7, key, 4000, 512) // past the region's end
	f.send(header.OpUCWriteLast, 102, 256, 7, 0, 0, 0)
	assert.Equal(t, uint64(2), ctr.RxUCAccess.Load())
	assert.Equal(t, uint64(1), ctr.RxUCResync.Load())
	assert.Equal(t, f.ft.orig, f.ft.whole, "dropped WRITEs wrote nothing")

	f.send(header.OpUCWriteFirst, 103, 256, 8, key, 1000, 300)
	f.send(header.OpUCWriteLastImm, 104, 44, 9, 0, 0, 0)
	f.expectMessage(t, ibv.WCRecvRDMAWithImm, 1000, 8, 9)
	mem := f.ft.whole[4096:]
	f.send(header.OpUCWriteOnly, 105, 4, 10, key, 2000, 4)
	assert.Equal(t, []byte{10, 10, 10, 10}, mem[2000:2004])
	require.Len(t, f.ft.cq.wcs, 1, "a plain WRITE consumes no receive")
	assert.Empty(t, f.ft.port.sent)
}

// TestUCNoReceive: a SEND with no receive posted is dropped and counted.
func TestUCNoReceive(t *testing.T) {
	f := newUCFeed(t)
	for i := range 4 {
		f.sendOp(header.OpUCSendOnly, header.PSN(100+i), 8, 1)
	}
	require.Len(t, f.ft.cq.wcs, 4)
	f.sendOp(header.OpUCSendOnly, 104, 8, 1)
	f.sendOp(header.OpUCSendFirst, 105, 256, 1)
	f.sendOp(header.OpUCSendLast, 106, 8, 1)
	assert.Equal(t, uint64(2), f.ft.e.Ctr.RxNoRecv.Load())
	assert.Equal(t, uint64(1), f.ft.e.Ctr.RxUCResync.Load())
	require.NoError(t, f.ft.uc.PostRecv(&ibv.RecvWR{ID: 30, SGL: []ibv.SGE{f.ft.mr.SGE(0, 10)}}))
	f.sendOp(header.OpUCSendOnly, 107, 20, 1) // longer than the receive
	require.Len(t, f.ft.cq.wcs, 5)
	assert.Equal(t, ibv.WCLocLenErr, f.ft.cq.wcs[4].Status)
	assert.Equal(t, ibv.QPSRTS, f.ft.uc.State())
}

// TestUCSendPackets checks the packets a UC QP builds: UC opcodes, PSNs
// from the SQ PSN, no AckReq, a RETH on a WRITE's first packet only; each
// work request completes once its last packet is out.
func TestUCSendPackets(t *testing.T) {
	f := newUCFeed(t)
	q := f.ft.uc
	require.NoError(t, q.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRSendWithImm, Flags: ibv.SendSignaled, Imm: 5,
		SGL: []ibv.SGE{f.ft.mr.SGE(0, 600)}}))
	require.NoError(t, q.PostSend(&ibv.SendWR{ID: 2, Opcode: ibv.WRRDMAWriteWithImm, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{f.ft.mr.SGE(0, 300)}, RemoteAddr: 0x7000, RKey: 0x55}))
	require.NoError(t, q.PostSend(&ibv.SendWR{ID: 3, Opcode: ibv.WRRDMAWrite, SGL: []ibv.SGE{f.ft.mr.SGE(0, 10)}, RemoteAddr: 0x9000, RKey: 0x55}))
	f.ft.e.Process()
	ops := []header.Opcode{header.OpUCSendFirst, header.OpUCSendMiddle, header.OpUCSendLastImm, header.OpUCWriteFirst, header.OpUCWriteLastImm, header.OpUCWriteOnly}
	require.Len(t, f.ft.port.sent, len(ops))
	var p header.Packet
	for i, raw := range f.ft.port.sent {
		require.NoError(t, header.ParsePacket(raw, &p))
		assert.Equal(t, ops[i], p.BTH.Opcode(), "packet %d", i)
		assert.Equal(t, header.PSN(500+i), p.BTH.PSN())
		assert.False(t, p.BTH.AckReq())
		assert.Equal(t, uint32(peerQPN), p.BTH.DestQPN())
		assert.Equal(t, i == 3 || i == 5, p.RETH != nil)
	}
	require.NoError(t, header.ParsePacket(f.ft.port.sent[3], &p))
	assert.Equal(t, uint32(300), p.RETH.DMALength())
	assert.Equal(t, uint64(0x7000), p.RETH.VA())
	require.Len(t, f.ft.cq.wcs, 2, "unsignaled WRITE completes silently")
	assert.Equal(t, ibv.WC{WRID: 1, Opcode: ibv.WCSend, ByteLen: 600, QPN: q.QPN(), SrcQP: peerQPN}, f.ft.cq.wcs[0])
	assert.Equal(t, ibv.WC{WRID: 2, Opcode: ibv.WCRDMAWrite, ByteLen: 300, QPN: q.QPN(), SrcQP: peerQPN}, f.ft.cq.wcs[1])
	assert.True(t, q.quiet(), "nothing awaits an ACK")
}

// TestUCDrain: moving to SQD lets the message in progress out whole and
// starts no other; the SQ then reports drained.
func TestUCDrain(t *testing.T) {
	f := newUCFeed(t)
	q := f.ft.uc
	var events []QPEvent
	f.ft.e.onEvent = func(_ *QP, ev QPEvent) { events = append(events, ev) }
	for id := range uint64(2) {
		require.NoError(t, q.PostSend(&ibv.SendWR{ID: id, Opcode: ibv.WRSend, Flags: ibv.SendSignaled, SGL: []ibv.SGE{f.ft.mr.SGE(0, 600)}}))
	}
	f.ft.e.passLeft = 1 // one packet, then the pass ends
	q.service(0)
	require.Len(t, f.ft.port.sent, 1)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSSQD}, ibv.QPAttrState))
	f.ft.e.Process()
	require.Equal(t, 3, len(f.ft.port.sent), "the first message whole, nothing of the second")
	require.Len(t, f.ft.cq.wcs, 1)
	assert.Equal(t, []QPEvent{QPEventSQDrained}, events)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS}, ibv.QPAttrState))
	f.ft.e.Process()
	require.Equal(t, 6, len(f.ft.port.sent))
	require.Len(t, f.ft.cq.wcs, 2)
}

// TestUCRules: UC's modify masks and send opcodes.
func TestUCRules(t *testing.T) {
	ft := newFuzzTarget(t)
	q, err := ft.e.CreateQP(&QPConfig{Memory: &testMemory{ft.mr}, SendCQ: ft.cq, RecvCQ: ft.cq, Type: ibv.QPTypeUC, Cap: ibv.QPCap{MaxSendWR: 2, MaxRecvWR: 2}})
	require.NoError(t, err)
	assert.ErrorIs(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit}, ibv.QPAttrState), ibv.ErrInvalidArgument, "P_Key index, port, access needed")
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, Port: 1}, ibv.QPAttrState|ibv.QPAttrPKeyIndex|ibv.QPAttrPort|ibv.QPAttrAccessFlags))
	rtr := &ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU1024, DestQPN: peerQPN, RQPSN: 1, AV: ibv.AddressVector{DGID: peerGID}, MaxDestRdAtomic: 1}
	mask := ibv.QPAttrState | ibv.QPAttrAV | ibv.QPAttrPathMTU | ibv.QPAttrDestQPN | ibv.QPAttrRQPSN
	assert.ErrorIs(t, q.Modify(rtr, mask|ibv.QPAttrMaxDestRdAtomic), ibv.ErrInvalidArgument)
	assert.ErrorIs(t, q.Modify(rtr, mask|ibv.QPAttrMinRNRTimer), ibv.ErrInvalidArgument)
	assert.ErrorIs(t, q.Modify(rtr, mask&^ibv.QPAttrRQPSN), ibv.ErrInvalidArgument)
	require.NoError(t, q.Modify(rtr, mask))
	rts := &ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7}
	for _, m := range []ibv.QPAttrMask{ibv.QPAttrTimeout, ibv.QPAttrRetryCnt, ibv.QPAttrRNRRetry, ibv.QPAttrMaxQPRdAtomic} {
		assert.ErrorIs(t, q.Modify(rts, ibv.QPAttrState|ibv.QPAttrSQPSN|m), ibv.ErrInvalidArgument)
	}
	require.NoError(t, q.Modify(rts, ibv.QPAttrState|ibv.QPAttrSQPSN))
	for _, op := range []ibv.WROpcode{ibv.WRRDMARead, ibv.WRAtomicCmpAndSwp, ibv.WRAtomicFetchAndAdd, ibv.WRSendWithInv} {
		assert.ErrorIs(t, q.PostSend(&ibv.SendWR{Opcode: op, SGL: []ibv.SGE{ft.mr.SGE(0, 8)}}), ibv.ErrInvalidArgument, "%v", op)
	}
	require.NoError(t, q.PostSend(&ibv.SendWR{Opcode: ibv.WRSend, SGL: []ibv.SGE{ft.mr.SGE(0, 8)}}))
	// An RC packet for the UC QP is another service's.
	before := ft.e.Ctr.RxWrongService.Load()
	ft.e.Receive(ft.packet(header.OpRCSendOnly, 1, 8, func(p *header.Packet) { p.BTH.SetDestQPN(q.QPN()) }), &RecvInfo{SGID: peerGID})
	ft.e.Receive(ft.packet(header.OpUCSendOnly, 100, 8, nil), &RecvInfo{SGID: peerGID}) // to the RC QP
	assert.Equal(t, before+2, ft.e.Ctr.RxWrongService.Load())
}

// TestUCAllocatesNothing: sending and receiving UC messages allocate
// nothing.
func TestUCAllocatesNothing(t *testing.T) {
	f := newUCFeed(t)
	f.ft.port.keep = false
	q := f.ft.uc
	wr := ibv.SendWR{ID: 5, Opcode: ibv.WRRDMAWriteWithImm, Flags: ibv.SendSignaled, SGL: []ibv.SGE{f.ft.mr.SGE(2000, 600)}, RemoteAddr: 1, RKey: 2}
	recv := ibv.RecvWR{ID: 10, SGL: []ibv.SGE{f.ft.mr.SGE(0, 500)}}
	first := f.ft.packet(header.OpUCSendFirst, 0, 256, func(p *header.Packet) { p.BTH.SetDestQPN(q.QPN()) })
	last := f.ft.packet(header.OpUCSendLastImm, 0, 100, func(p *header.Packet) { p.BTH.SetDestQPN(q.QPN()) })
	f.ft.cq.wcs = make([]ibv.WC, 0, 8)
	psn := header.PSN(100)
	var postErr error
	step := func() {
		if err := q.PostSend(&wr); err != nil {
			postErr = err
		}
		header.BTH(first).SetPSN(psn)
		header.BTH(last).SetPSN(psn.Add(1))
		psn = psn.Add(2)
		f.ft.e.Receive(first, f.info)
		f.ft.e.Receive(last, f.info)
		f.ft.e.Process()
		if err := q.PostRecv(&recv); err != nil {
			postErr = err
		}
		f.ft.cq.wcs = f.ft.cq.wcs[:0]
	}
	step()
	assert.Zero(t, testing.AllocsPerRun(1000, step))
	require.NoError(t, postErr)
	ctr := &f.ft.e.Ctr
	assert.Zero(t, ctr.RxNoRecv.Load()+ctr.RxUCPSNGap.Load()+ctr.RxUCOpSeq.Load()+ctr.RxUCLength.Load())
}
