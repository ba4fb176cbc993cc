package ibtransport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// fakePort collects the packets an engine sends, without any framing.
type fakePort struct {
	buf  [9000]byte
	sent [][]byte
	keep bool
}

func (f *fakePort) Path(*ibv.AddressVector, uint32, int) (TxPath, error) { return f, nil }
func (f *fakePort) Buffer() []byte                                       { return f.buf[:] }
func (f *fakePort) ActiveMTU() int                                       { return 1024 }
func (f *fakePort) Send(n int) {
	if f.keep {
		f.sent = append(f.sent, append([]byte(nil), f.buf[:n]...))
	}
}

var peerGID = ibv.GID{0: 0xfe, 15: 2}

const peerQPN = 0x99

// fuzzTarget is an engine with one QP in RTS and a guarded memory region.
type fuzzTarget struct {
	e    *Engine
	port *fakePort
	qp   *QP
	ud   *QP // a UD QP in RTS with receives posted
	uc   *QP // a UC QP in RTS with receives posted
	tm   *QP // an RC QP in RTS on a TM SRQ (tm_test.go)
	// xrc is an XRC target in RTS; xrcMine an XRC SRQ of its domain with
	// receives posted, xrcOther one of another domain.
	xrc               *QP
	xrcMine, xrcOther *XRCSRQ
	mr                *testRegion
	whole             []byte
	orig              []byte
	cq                *testCQ
}

func newFuzzTarget(t testing.TB) *fuzzTarget {
	port := &fakePort{}
	e := NewEngine(port, func() {})
	e.Exit() // no engine goroutine: calls run inline
	ft := &fuzzTarget{e: e, port: port, whole: make([]byte, 3*4096)}
	for i := range ft.whole {
		ft.whole[i] = byte(i * 31)
	}
	ft.orig = append([]byte(nil), ft.whole...)
	ft.mr = newTestRegion(ft.whole[4096:8192], 0x1234, ibv.AccessAll)
	ft.cq = &testCQ{}
	var err error
	ft.qp, err = e.CreateQP(&QPConfig{Memory: &testMemory{ft.mr}, SendCQ: ft.cq, RecvCQ: ft.cq, Cap: ibv.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(t, err)
	q := ft.qp
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessRemoteAtomic |
		ibv.AccessFlushGlobal},
		ibv.QPAttrState|ibv.QPAttrAccessFlags))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU256, DestQPN: peerQPN, RQPSN: 100, MaxDestRdAtomic: 2,
		AV: ibv.AddressVector{DGID: peerGID}}, ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|
		ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 500, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 2},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	for i := range 4 {
		require.NoError(t, q.PostRecv(&ibv.RecvWR{ID: uint64(i), SGL: []ibv.SGE{ft.mr.SGE(i*1000, 1000)}}))
	}
	// Something outstanding, so responses have a WQE to match.
	require.NoError(t, q.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{ft.mr.SGE(0, 600)}, RemoteAddr: 0x1000, RKey: 1}))
	e.Process()
	ft.ud = newUDTarget(t, e, &testMemory{ft.mr}, ft.cq, ft.mr)
	ft.uc = newUCTarget(t, e, &testMemory{ft.mr}, ft.cq, ft.mr)
	ft.tm, _ = newTMTarget(t, e, &testMemory{ft.mr}, ft.cq, ft.mr)
	ft.xrc, ft.xrcMine, ft.xrcOther = newXRCTarget(t, e, &testMemory{ft.mr}, ft.cq, ft.mr)
	return ft
}

// fuzzQKey is the Q_Key of the fuzz target's UD QP.
const fuzzQKey = 0x1234567

// newUDTarget creates a UD QP in RTS on e with Q_Key fuzzQKey and four
// receives of 500 bytes in mr.
func newUDTarget(t testing.TB, e *Engine, mem Memory, cq CompletionQueue, mr *testRegion) *QP {
	q, err := e.CreateQP(&QPConfig{Memory: mem, SendCQ: cq, RecvCQ: cq, Type: ibv.QPTypeUD, Cap: ibv.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	require.NoError(t, err)
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, Port: 1, QKey: fuzzQKey}, ibv.QPAttrState|ibv.QPAttrPKeyIndex|ibv.QPAttrPort|ibv.QPAttrQKey))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR}, ibv.QPAttrState))
	require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 1}, ibv.QPAttrState|ibv.QPAttrSQPSN))
	for i := range 4 {
		require.NoError(t, q.PostRecv(&ibv.RecvWR{ID: uint64(10 + i), SGL: []ibv.SGE{mr.SGE(i*500, 500)}}))
	}
	return q
}

// packet builds a request or response aimed at the target's QP.
func (ft *fuzzTarget) packet(op header.Opcode, psn header.PSN, payload int, fill func(p *header.Packet)) []byte {
	return ft.packetTo(ft.qp, op, psn, payload, fill)
}

// packetTo builds one aimed at q.
func (ft *fuzzTarget) packetTo(q *QP, op header.Opcode, psn header.PSN, payload int, fill func(p *header.Packet)) []byte {
	b := make([]byte, 4200)
	var p header.Packet
	n, err := header.LayoutPacket(b, op, payload, &p)
	if err != nil {
		panic(err)
	}
	p.BTH.SetDestQPN(q.QPN())
	p.BTH.SetPSN(psn)
	p.BTH.SetAckReq(true)
	if fill != nil {
		fill(&p)
	}
	return b[:n]
}

// FuzzEngineReceive feeds arbitrary packets to an engine whose QP holds
// posted receives, an outstanding READ and a registered region: nothing may
// panic, and no byte outside the region may change.
func FuzzEngineReceive(f *testing.F) {
	ft := newFuzzTarget(f)
	reth := func(off uint64, n uint32) func(p *header.Packet) {
		return func(p *header.Packet) {
			p.RETH.SetVA(ft.mr.Addr() + off)
			p.RETH.SetRKey(ft.mr.RKey())
			p.RETH.SetDMALength(n)
		}
	}
	f.Add(ft.packet(header.OpRCWriteOnly, 100, 64, reth(0, 64)))
	f.Add(ft.packet(header.OpRCWriteFirst, 100, 256, reth(3800, 512)))
	f.Add(ft.packet(header.OpRCReadRequest, 100, 0, reth(10, 3000)))
	f.Add(ft.packet(header.OpRCSendOnlyImm, 100, 200, nil))
	f.Add(ft.packet(header.OpRCSendFirst, 100, 256, nil))
	f.Add(ft.packet(header.OpRCFetchAdd, 100, 0, func(p *header.Packet) {
		p.AtomicETH.SetVA(ft.mr.Addr() + 8)
		p.AtomicETH.SetRKey(ft.mr.RKey())
	}))
	f.Add(ft.packet(header.OpRCAtomicWrite, 100, 8, reth(16, 8)))
	f.Add(ft.packet(header.OpRCAtomicWrite, 100, 8, reth(4092, 8))) // unaligned, past the end
	f.Add(ft.packet(header.OpRCFlush, 100, 0, func(p *header.Packet) {
		reth(0, 4096)(p)
		p.FETH.Set(header.FlushGlobal, header.FlushRange)
	}))
	f.Add(ft.packet(header.OpRCFlush, 100, 0, func(p *header.Packet) {
		reth(1<<40, 1<<31+1)(p)
		p.FETH.Set(header.FlushGlobal|header.FlushPersistent, header.FlushMR)
	}))
	f.Add(ft.packet(header.OpRCReadResponseFirst, 500, 256, nil))
	f.Add(ft.packet(header.OpRCAcknowledge, 500, 0, func(p *header.Packet) { p.AETH.SetSyndrome(header.NAKSyndrome(header.NAKPSNSequenceError)) }))
	f.Add(ft.packet(header.OpRCSendLastInv, 100, 4, func(p *header.Packet) { p.IETH.SetRKey(ft.mr.RKey()) }))
	deth := func(qkey uint32) func(p *header.Packet) {
		return func(p *header.Packet) {
			p.DETH.SetQKey(qkey)
			p.DETH.SetSrcQP(peerQPN)
		}
	}
	f.Add(ft.packet(header.OpUDSendOnly, 7, 300, deth(fuzzQKey)))
	f.Add(ft.packet(header.OpUDSendOnlyImm, 8, 460, deth(fuzzQKey)))
	f.Add(ft.packet(header.OpUDSendOnly, 9, 20, deth(fuzzQKey+1)))
	f.Add(ft.packet(header.OpUCSendFirst, 100, 256, nil))
	f.Add(ft.packet(header.OpUCSendOnlyImm, 100, 200, nil))
	f.Add(ft.packet(header.OpUCWriteFirst, 100, 256, reth(3800, 512)))
	f.Add(ft.packet(header.OpUCWriteOnlyImm, 100, 64, reth(0, 64)))
	// A UC message with a PSN gap, as two length-prefixed packets.
	gap := append([]byte{16}, ft.packet(header.OpUCSendFirst, 100, 256, nil)...)
	f.Add(append(append(gap, 1), ft.packet(header.OpUCSendLast, 102, 10, nil)...))
	// A CNP (congestion control), and a SEND marked CE (BTH byte 4 bit
	// 0x20 selects the CE mark below).
	f.Add(ft.packet(header.OpCNP, 0, 16, func(p *header.Packet) { p.BTH.SetBECN(true) }))
	f.Add(ft.packet(header.OpRCSendOnly, 100, 30, func(p *header.Packet) { p.BTH[4] |= 0x20 }))
	// Tag matching: a matched EAGER and RNDV, an unexpected one, NO_TAG,
	// too short a header, a RNDV without its whole RVH.
	f.Add(ft.tmSend(header.TMEager, 0x5a, 300))
	f.Add(ft.tmSend(header.TMRndv, 0x15a, 64))
	f.Add(ft.tmSend(header.TMEager, 0x11, 40))
	f.Add(ft.tmSend(header.TMNoTag, 0, 20))
	f.Add(ft.tmSend(header.TMEager, 0x5a, 10))
	f.Add(ft.tmSend(header.TMRndv, 0x5a, 24))
	// XRC requests (opcodes 0xa0 and up go to the XRC target): into its
	// domain's SRQ, another domain's, a WRITE and READ against the SRQ's
	// memory, and a SEND of two packets whose second names another SRQ.
	xrc := func(srqn uint32, more func(p *header.Packet)) func(p *header.Packet) {
		return func(p *header.Packet) {
			p.XRCETH.SetSRQN(srqn)
			if more != nil {
				more(p)
			}
		}
	}
	mine, other := ft.xrcMine.Num(), ft.xrcOther.Num()
	f.Add(ft.packet(header.XRCOpcodeBase|header.OpRCSendOnlyImm, 100, 200, xrc(mine, nil)))
	f.Add(ft.packet(header.XRCOpcodeBase|header.OpRCSendOnly, 100, 20, xrc(other, nil)))
	f.Add(ft.packet(header.XRCOpcodeBase|header.OpRCWriteOnly, 100, 64, xrc(mine, reth(0, 64))))
	f.Add(ft.packet(header.XRCOpcodeBase|header.OpRCReadRequest, 100, 0, xrc(mine, reth(10, 3000))))
	split := append([]byte{16}, ft.packet(header.XRCOpcodeBase|header.OpRCSendFirst, 100, 256, xrc(mine, nil))...)
	f.Add(append(append(split, 1), ft.packet(header.XRCOpcodeBase|header.OpRCSendLast, 101, 10, xrc(other, nil))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		ft := newFuzzTarget(t)
		ip4 := make([]byte, 20)
		ip4[0] = 0x45
		info := &RecvInfo{SGID: peerGID, NetHeader: ip4}
		// The input may hold several packets, each preceded by its length.
		for len(data) > 0 {
			n := int(data[0])<<4 + 12
			data = data[1:]
			pkt := data[:min(n, len(data))]
			data = data[len(pkt):]
			if len(pkt) >= header.BTHLen {
				// Aim at the QP and keep the PSN near the expected one, or
				// everything is just out of sequence.
				header.BTH(pkt).SetDestQPN(ft.qp.QPN())
				switch pkt[0] & 0xe0 {
				case 0x60:
					header.BTH(pkt).SetDestQPN(ft.ud.QPN())
				case 0x20:
					header.BTH(pkt).SetDestQPN(ft.uc.QPN())
				case 0x00:
					if pkt[4]&0x10 != 0 {
						header.BTH(pkt).SetDestQPN(ft.tm.QPN())
					}
				case 0xa0:
					header.BTH(pkt).SetDestQPN(ft.xrc.QPN())
				}
				if pkt[9]&0x80 == 0 {
					header.BTH(pkt).SetPSN(100 + header.PSN(pkt[11]&3))
				}
				info.CE = pkt[4]&0x20 != 0
			}
			ft.e.Receive(pkt, info)
			ft.e.Process()
		}
		require.True(t, bytes.Equal(ft.orig[:4096], ft.whole[:4096]) && bytes.Equal(ft.orig[8192:], ft.whole[8192:]),
			"bytes outside the registered region changed")
		require.LessOrEqual(t, ft.qp.State(), ibv.QPSErr)
		require.Equal(t, ibv.QPSRTS, ft.ud.State(), "a UD QP stays up whatever it receives")
		require.Equal(t, ibv.QPSRTS, ft.uc.State(), "a UC QP stays up whatever it receives")
	})
}

// TestEngineResponses checks a few exchanges at the packet level.
func TestEngineResponses(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.port.keep = true
	info := &RecvInfo{SGID: peerGID}
	// From a stranger GID: ignored.
	ft.e.Receive(ft.packet(header.OpRCWriteOnly, 100, 0, nil), &RecvInfo{SGID: ibv.GID{1}})
	ft.e.Process()
	require.Empty(t, ft.port.sent)
	require.Equal(t, uint64(1), ft.e.Ctr.RxFiltered.Load())
	// To another of the device's GIDs than the QP's source GID: ignored.
	ft.e.Receive(ft.packet(header.OpRCWriteOnly, 100, 0, nil), &RecvInfo{SGID: peerGID, DGIDIndex: 1})
	require.Equal(t, uint64(2), ft.e.Ctr.RxFiltered.Load())
	// Another partition: ignored.
	ft.e.Receive(ft.packet(header.OpRCWriteOnly, 100, 0, func(p *header.Packet) { p.BTH.SetPKey(0x8001) }), info)
	require.Equal(t, uint64(1), ft.e.Ctr.RxBadPKey.Load())
	ft.e.Process()
	require.Empty(t, ft.port.sent)
	// A 3-packet READ at MTU 256 of 600 bytes: FIRST, MIDDLE, LAST with
	// AETH on FIRST and LAST.
	ft.e.Receive(ft.packet(header.OpRCReadRequest, 100, 0, func(p *header.Packet) {
		p.RETH.SetVA(ft.mr.Addr() + 100)
		p.RETH.SetRKey(ft.mr.RKey())
		p.RETH.SetDMALength(600)
	}), info)
	ft.e.Process()
	require.Len(t, ft.port.sent, 3)
	var p header.Packet
	ops := []header.Opcode{header.OpRCReadResponseFirst, header.OpRCReadResponseMiddle, header.OpRCReadResponseLast}
	for i, raw := range ft.port.sent {
		require.NoError(t, header.ParsePacket(raw, &p))
		require.Equal(t, ops[i], p.BTH.Opcode())
		require.Equal(t, header.PSN(100+i), p.BTH.PSN())
		require.Equal(t, uint32(peerQPN), p.BTH.DestQPN())
		require.Equal(t, i != 1, p.AETH != nil)
		want := ft.whole[4096+100+i*256 : 4096+100+min((i+1)*256, 600)]
		require.Equal(t, want, p.Payload)
	}
	// An ACK for PSNs never sent retires nothing.
	ft.e.Receive(ft.packet(header.OpRCAcknowledge, 700, 0, func(p *header.Packet) { p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits)) }), info)
	require.Equal(t, uint64(1), ft.e.Ctr.RxBadResponse.Load())
	// A NAK for the QP's own READ fails it with the matching status.
	ft.port.sent = nil
	ft.e.Receive(ft.packet(header.OpRCAcknowledge, 500, 0, func(p *header.Packet) {
		p.AETH.SetSyndrome(header.NAKSyndrome(header.NAKRemoteAccessError))
	}), info)
	var wcs [8]ibv.WC
	n, err := ft.cq.Poll(wcs[:])
	require.NoError(t, err)
	require.Equal(t, 5, n) // the READ, then the four receives flushed
	require.Equal(t, ibv.WCRemAccessErr, wcs[0].Status)
	require.Equal(t, uint64(1), wcs[0].WRID)
	for _, wc := range wcs[1:5] {
		require.Equal(t, ibv.WCWRFlushErr, wc.Status)
	}
	require.Equal(t, ibv.QPSErr, ft.qp.State())
}
