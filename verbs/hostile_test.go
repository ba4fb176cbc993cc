package verbs_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// guarded is a registered region inside a larger buffer whose guard bytes
// around it must never change.
type guarded struct {
	mr    *verbs.MR
	whole []byte
	orig  []byte
}

const guardLen = 256

func newGuarded(t testing.TB, pd *verbs.PD, n int, access verbs.Access, seed byte) *guarded {
	t.Helper()
	whole := make([]byte, n+2*guardLen)
	fill(whole, seed)
	mr, err := pd.RegMR(whole[guardLen:guardLen+n], access)
	require.NoError(t, err)
	return &guarded{mr: mr, whole: whole, orig: append([]byte(nil), whole...)}
}

// unchanged checks that not a byte of the buffer, region included, changed.
func (g *guarded) unchanged(t testing.TB) {
	t.Helper()
	require.True(t, bytes.Equal(g.orig, g.whole), "memory changed at byte %d", firstDiff(g.orig, g.whole))
}

// TestRemoteErrorsGiveRightStatus drives a real requester against a real
// responder with bad requests: the requester gets the status libibverbs
// names, and the responder's memory stays as it was. Through the daemon,
// both QPs are daemon clients.
func TestRemoteErrorsGiveRightStatus(t *testing.T) {
	forEachMode(t, testRemoteErrorsGiveRightStatus)
}

func testRemoteErrorsGiveRightStatus(t *testing.T, m mode) {
	type env struct {
		x, y     *endpoint
		local    *guarded
		target   *guarded
		otherPD  *guarded
		readOnly *guarded
		wrOnly   *guarded
	}
	cases := []struct {
		name   string
		wr     func(e *env) verbs.SendWR
		status verbs.WCStatus
	}{
		{"invalid rkey", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.target.mr.Addr(), RKey: e.target.mr.RKey() ^ 0x5a5a5a5a}
		}, verbs.WCRemAccessErr},
		{"write past the end", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.target.mr.Addr() + 4096 - 100, RKey: e.target.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"write before the start", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.target.mr.Addr() - 8, RKey: e.target.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"read past the end", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: e.target.mr.Addr() + 4000, RKey: e.target.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"address wraps around", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: ^uint64(0) - 50, RKey: e.target.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"write without remote write", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.readOnly.mr.Addr(), RKey: e.readOnly.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"read without remote read", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: e.wrOnly.mr.Addr(), RKey: e.wrOnly.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"atomic without remote atomic", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, RemoteAddr: e.wrOnly.mr.Addr(), RKey: e.wrOnly.mr.RKey(), CompareAdd: 1}
		}, verbs.WCRemAccessErr},
		{"wrong PD", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.otherPD.mr.Addr(), RKey: e.otherPD.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"misaligned atomic", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, RemoteAddr: e.target.mr.Addr() + 4, RKey: e.target.mr.RKey()}
		}, verbs.WCRemInvReqErr},
		{"deregistered MR", func(e *env) verbs.SendWR {
			g := newGuarded(t, e.y.pd, 4096, allAccess, 77)
			require.NoError(t, g.mr.Dereg())
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: g.mr.Addr(), RKey: g.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"receive too small", func(e *env) verbs.SendWR {
			require.NoError(t, e.y.qp.PostRecv(&verbs.RecvWR{ID: 5, SGL: []verbs.SGE{e.target.mr.SGE(0, 100)}}))
			return verbs.SendWR{Opcode: verbs.WRSend}
		}, verbs.WCRemInvReqErr},
		{"receive with a bad lkey", func(e *env) verbs.SendWR {
			sge := e.target.mr.SGE(0, 4096)
			sge.LKey ^= 1
			require.NoError(t, e.y.qp.PostRecv(&verbs.RecvWR{ID: 5, SGL: []verbs.SGE{sge}}))
			return verbs.SendWR{Opcode: verbs.WRSend}
		}, verbs.WCRemOpErr},
		{"local SGE with a bad lkey", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.target.mr.Addr(), RKey: e.target.mr.RKey(),
				SGL: []verbs.SGE{{Addr: e.local.mr.Addr(), Length: 10, LKey: e.local.mr.LKey() + 1}}}
		}, verbs.WCLocProtErr},
		{"local SGE out of bounds", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.target.mr.Addr(), RKey: e.target.mr.RKey(),
				SGL: []verbs.SGE{e.local.mr.SGE(4000, 200)}}
		}, verbs.WCLocProtErr},
		{"remote rkey used as lkey", func(e *env) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: e.target.mr.Addr(), RKey: e.target.mr.RKey(),
				SGL: []verbs.SGE{{Addr: e.local.mr.Addr(), Length: 10, LKey: e.local.mr.RKey()}}}
		}, verbs.WCLocProtErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := defaultOpts()
			_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
			e := &env{x: x, y: y,
				local:    newGuarded(t, x.pd, 4096, allAccess, 1),
				target:   newGuarded(t, y.pd, 4096, allAccess, 2),
				otherPD:  newGuarded(t, y.dev.AllocPD(), 4096, allAccess, 3),
				readOnly: newGuarded(t, y.pd, 4096, verbs.AccessRemoteRead, 4),
				wrOnly:   newGuarded(t, y.pd, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, 5),
			}
			wr := c.wr(e)
			wr.ID = 1
			wr.Flags |= verbs.SendSignaled
			if wr.SGL == nil {
				wr.SGL = []verbs.SGE{e.local.mr.SGE(0, 200)}
				if wr.Opcode == verbs.WRAtomicFetchAndAdd || wr.Opcode == verbs.WRAtomicCmpAndSwp {
					wr.SGL = []verbs.SGE{e.local.mr.SGE(0, 8)}
				}
			}
			require.NoError(t, x.qp.PostSend(&wr))
			require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{e.local.mr.SGE(0, 1)}}))
			wc := waitWC(t, x.scq)
			require.Equal(t, uint64(1), wc.WRID)
			require.Equal(t, c.status, wc.Status)
			wc = waitWC(t, x.scq)
			require.Equal(t, uint64(2), wc.WRID)
			require.Equal(t, verbs.WCWRFlushErr, wc.Status)
			require.Equal(t, verbs.QPSErr, x.qp.State())
			if c.status != verbs.WCLocProtErr {
				// A remote error fails the responder's QP too.
				require.Eventually(t, func() bool { return y.qp.State() == verbs.QPSErr }, 5*time.Second, time.Millisecond)
			}
			for _, g := range []*guarded{e.local, e.target, e.otherPD, e.readOnly, e.wrOnly} {
				g.unchanged(t)
			}
		})
	}
}

// rawPeer is a hostile requester: the test itself drives one end of the link
// and sends hand-made packets to a verbs QP on the other end, whose
// transport engine runs.
type rawPeer struct {
	t      *testing.T
	link   *memlink.Endpoint
	encap  roce.Encap
	qpn    uint32 // the victim QP
	victim *endpoint
	engine *verbs.Device
	pkt    header.Packet
	// stashed is a response sendUntilReceived read for response to return.
	stashed *rawResponse
}

type rawResponse struct {
	op      header.Opcode
	psn     header.PSN
	syn     header.Syndrome
	payload []byte
}

const rawQPN = 0x4242

func newRawPeer(t *testing.T, m mode, access verbs.Access) *rawPeer {
	la, lb := memlink.Pair(memlink.Config{})
	var cl closers
	t.Cleanup(cl.close)
	cl.add(func() { la.Close(); lb.Close() })
	dev, engine := openMode(t, m, lb, verbs.Config{}, addrB, &cl)
	o := defaultOpts()
	o.access = access
	v := newEndpoint(t, dev, nil, o, nil)
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: access}, verbs.QPAttrState|verbs.QPAttrAccessFlags))
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: rawQPN, RQPSN: 1000,
		MaxDestRdAtomic: 4, MinRNRTimer: 1, AV: verbs.AddressVector{DGID: roce.GIDFromAddr(addrA)}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	return &rawPeer{t: t, link: la, victim: v, engine: engine, qpn: v.qp.QPN(),
		encap: roce.Encap{SrcMAC: la.HardwareAddr(), DstMAC: lb.HardwareAddr(), Src: addrA, Dst: addrB, HopLimit: 64, SrcPort: 0xc001}}
}

// send builds one packet with build filling the headers and payload.
func (r *rawPeer) send(op header.Opcode, psn header.PSN, payload int, build func(p *header.Packet)) {
	buf := r.link.TxFrame()
	for deadline := time.Now().Add(5 * time.Second); buf == nil && time.Now().Before(deadline); buf = r.link.TxFrame() {
		r.link.Wait(time.Millisecond) // the victim has not consumed our frames yet
	}
	require.NotNil(r.t, buf)
	hl := r.encap.HeaderLen()
	n, err := header.LayoutPacket(buf[hl:], op, payload, &r.pkt)
	require.NoError(r.t, err)
	r.pkt.BTH.SetDestQPN(r.qpn)
	r.pkt.BTH.SetPSN(psn)
	r.pkt.BTH.SetAckReq(true)
	if build != nil {
		build(&r.pkt)
	}
	l, err := r.encap.Finish(buf, n)
	require.NoError(r.t, err)
	r.link.Send(buf[:l])
	require.NoError(r.t, r.link.Flush())
}

// sendUntilReceived sends like send, again as long as the victim answers
// with an RNR NAK, as a requester retries: through the daemon, a receive
// the test posted just before may still be in the client's ring when the
// packet arrives. The answer that is not an RNR NAK is left for response.
func (r *rawPeer) sendUntilReceived(op header.Opcode, psn header.PSN, payload int, build func(p *header.Packet)) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		r.send(op, psn, payload, build)
		gotOp, gotPSN, syn, data := r.response()
		if syn.Kind() != header.SyndromeRNRNAK {
			r.stashed = &rawResponse{op: gotOp, psn: gotPSN, syn: syn, payload: data}
			return
		}
		r.link.Wait(time.Millisecond)
	}
	require.FailNow(r.t, "the victim never took the receive")
}

// response waits for the next packet from the victim and returns its opcode,
// PSN and syndrome (0 without AETH).
func (r *rawPeer) response() (header.Opcode, header.PSN, header.Syndrome, []byte) {
	if s := r.stashed; s != nil {
		r.stashed = nil
		return s.op, s.psn, s.syn, s.payload
	}
	deadline := time.Now().Add(5 * time.Second)
	var op header.Opcode
	var psn header.PSN
	var syn header.Syndrome
	var payload []byte
	for time.Now().Before(deadline) {
		got := r.link.Receive(func(frame []byte) {
			if frame == nil {
				return // the end of a batch
			}
			var f roce.Frame
			require.NoError(r.t, roce.ParseFrame(frame, &f))
			var p header.Packet
			require.NoError(r.t, header.ParsePacket(f.IB, &p))
			require.Equal(r.t, uint32(rawQPN), p.BTH.DestQPN())
			op, psn = p.BTH.Opcode(), p.BTH.PSN()
			if p.AETH != nil {
				syn = p.AETH.Syndrome()
			}
			payload = append([]byte(nil), p.Payload...)
		}, 1)
		if got == 1 {
			return op, psn, syn, payload
		}
		r.link.Wait(10 * time.Millisecond)
	}
	require.FailNow(r.t, "no response from the victim")
	return 0, 0, 0, nil
}

// silent checks that the victim sends nothing more.
func (r *rawPeer) silent() {
	time.Sleep(10 * time.Millisecond)
	require.Zero(r.t, r.link.Receive(func([]byte) {}, 1))
}

func TestHostilePeerNAKs(t *testing.T) { forEachMode(t, testHostilePeerNAKs) }

func testHostilePeerNAKs(t *testing.T, m mode) {
	nakAccess := header.NAKSyndrome(header.NAKRemoteAccessError)
	nakInvalid := header.NAKSyndrome(header.NAKInvalidRequest)
	type env struct {
		r                       *rawPeer
		good, readOnly, otherPD *guarded
	}
	reth := func(g *guarded, off uint64, n uint32) func(p *header.Packet) {
		return func(p *header.Packet) {
			p.RETH.SetVA(g.mr.Addr() + off)
			p.RETH.SetRKey(g.mr.RKey())
			p.RETH.SetDMALength(n)
		}
	}
	cases := []struct {
		name string
		qpAc verbs.Access
		send func(e *env)
		want header.Syndrome
	}{
		{"write with a guessed rkey", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteOnly, 1000, 16, func(p *header.Packet) {
				reth(e.good, 0, 16)(p)
				p.RETH.SetRKey(rand.Uint32())
			})
		}, nakAccess},
		{"write out of bounds", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteOnly, 1000, 16, reth(e.good, 4096-8, 16))
		}, nakAccess},
		{"write with a huge length", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteFirst, 1000, 1024, reth(e.good, 0, 1<<31))
		}, nakAccess},
		{"read out of bounds", allAccess, func(e *env) {
			e.r.send(header.OpRCReadRequest, 1000, 0, reth(e.good, 1, 4096))
		}, nakAccess},
		{"write to a read-only region", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteOnly, 1000, 16, reth(e.readOnly, 0, 16))
		}, nakAccess},
		{"write to a QP without remote write", verbs.AccessRemoteRead, func(e *env) {
			e.r.send(header.OpRCWriteOnly, 1000, 16, reth(e.good, 0, 16))
		}, nakAccess},
		{"region of another PD", allAccess, func(e *env) {
			e.r.send(header.OpRCReadRequest, 1000, 0, reth(e.otherPD, 0, 16))
		}, nakAccess},
		{"deregistered region", allAccess, func(e *env) {
			require.NoError(t, e.good.mr.Dereg())
			e.r.send(header.OpRCReadRequest, 1000, 0, reth(e.good, 0, 16))
		}, nakAccess},
		{"misaligned atomic", allAccess, func(e *env) {
			e.r.send(header.OpRCFetchAdd, 1000, 0, func(p *header.Packet) {
				p.AtomicETH.SetVA(e.good.mr.Addr() + 12)
				p.AtomicETH.SetRKey(e.good.mr.RKey())
				p.AtomicETH.SetSwapAdd(1)
			})
		}, nakInvalid},
		{"atomic past the end", allAccess, func(e *env) {
			e.r.send(header.OpRCFetchAdd, 1000, 0, func(p *header.Packet) {
				p.AtomicETH.SetVA(e.good.mr.Addr() + 4096)
				p.AtomicETH.SetRKey(e.good.mr.RKey())
			})
		}, nakAccess},
		{"payload longer than the RETH length", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteOnly, 1000, 32, reth(e.good, 0, 16))
		}, nakInvalid},
		{"SEND MIDDLE without FIRST", allAccess, func(e *env) {
			e.r.send(header.OpRCSendMiddle, 1000, 1024, nil)
		}, nakInvalid},
		{"WRITE FIRST shorter than the MTU", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteFirst, 1000, 100, reth(e.good, 0, 2000))
		}, nakInvalid},
		{"payload longer than the MTU", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteOnly, 1000, 1028, reth(e.good, 0, 1028))
		}, nakInvalid},
		{"SEND invalidating another PD's rkey", allAccess, func(e *env) {
			require.NoError(t, e.r.victim.qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{e.good.mr.SGE(0, 64)}}))
			e.r.sendUntilReceived(header.OpRCSendOnlyInv, 1000, 0, func(p *header.Packet) { p.IETH.SetRKey(e.otherPD.mr.RKey()) })
		}, nakInvalid},
		{"WRITE LAST beyond the announced length", allAccess, func(e *env) {
			e.r.send(header.OpRCWriteFirst, 1000, 1024, reth(e.good, 0, 1500))
			op, psn, syn, _ := e.r.response()
			require.Equal(t, header.OpRCAcknowledge, op)
			require.Equal(t, header.PSN(1000), psn)
			require.Equal(t, header.SyndromeACK, syn.Kind())
			e.r.send(header.OpRCWriteLast, 1001, 1024, nil)
		}, nakInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRawPeer(t, m, c.qpAc)
			e := &env{r: r,
				good:     newGuarded(t, r.victim.pd, 4096, allAccess, 1),
				readOnly: newGuarded(t, r.victim.pd, 4096, verbs.AccessRemoteRead, 2),
				otherPD:  newGuarded(t, r.victim.dev.AllocPD(), 4096, allAccess, 3),
			}
			c.send(e)
			op, psn, syn, _ := r.response()
			require.Equal(t, header.OpRCAcknowledge, op)
			require.Equal(t, c.want, syn, "got %v", syn)
			require.Equal(t, r.pkt.BTH.PSN(), psn)
			require.Eventually(t, func() bool { return r.victim.qp.State() == verbs.QPSErr }, 5*time.Second, time.Millisecond)
			// Further requests are ignored.
			r.send(header.OpRCReadRequest, r.pkt.BTH.PSN().Add(1), 0, reth(e.readOnly, 0, 16))
			r.silent()
			if c.name != "WRITE LAST beyond the announced length" {
				e.good.unchanged(t)
			}
			e.readOnly.unchanged(t)
			e.otherPD.unchanged(t)
		})
	}
}

// TestHostilePeerProtocol covers the checks that do not fail the QP:
// sequence NAKs, duplicates, RNR.
func TestHostilePeerProtocol(t *testing.T) { forEachMode(t, testHostilePeerProtocol) }

func testHostilePeerProtocol(t *testing.T, m mode) {
	r := newRawPeer(t, m, allAccess)
	g := newGuarded(t, r.victim.pd, 4096, allAccess, 1)
	rethTo := func(off uint64, n uint32) func(p *header.Packet) {
		return func(p *header.Packet) {
			p.RETH.SetVA(g.mr.Addr() + off)
			p.RETH.SetRKey(g.mr.RKey())
			p.RETH.SetDMALength(n)
		}
	}
	// A gap: one sequence NAK carrying the expected PSN, not one per packet.
	r.send(header.OpRCWriteOnly, 1002, 8, rethTo(0, 8))
	r.send(header.OpRCWriteOnly, 1003, 8, rethTo(0, 8))
	op, psn, syn, _ := r.response()
	require.Equal(t, header.OpRCAcknowledge, op)
	require.Equal(t, header.NAKSyndrome(header.NAKPSNSequenceError), syn)
	require.Equal(t, header.PSN(1000), psn)
	r.silent()
	// In order now.
	r.send(header.OpRCWriteOnly, 1000, 8, func(p *header.Packet) {
		rethTo(0, 8)(p)
		copy(p.Payload, "ABCDEFGH")
	})
	_, psn, syn, _ = r.response()
	require.Equal(t, header.PSN(1000), psn)
	require.Equal(t, header.ACKSyndrome(header.UnlimitedCredits), syn)
	// A duplicate WRITE is acknowledged again, not executed again.
	g.whole[guardLen] = 'Z'
	r.send(header.OpRCWriteOnly, 1000, 8, rethTo(0, 8))
	_, psn, syn, _ = r.response()
	require.Equal(t, header.PSN(1000), psn)
	require.Equal(t, header.SyndromeACK, syn.Kind())
	require.Equal(t, "ZBCDEFGH", string(g.whole[guardLen:guardLen+8]))
	// An atomic, then its duplicate: the original value is replayed, the
	// addition happens once.
	g.whole[guardLen+8] = 5
	add := func(p *header.Packet) {
		p.AtomicETH.SetVA(g.mr.Addr() + 8)
		p.AtomicETH.SetRKey(g.mr.RKey())
		p.AtomicETH.SetSwapAdd(10)
	}
	for range 2 {
		r.send(header.OpRCFetchAdd, 1001, 0, add)
		op, psn, _, _ = r.response()
		require.Equal(t, header.OpRCAtomicAcknowledge, op)
		require.Equal(t, header.PSN(1001), psn)
	}
	require.Equal(t, byte(15), g.whole[guardLen+8])
	// A READ and its duplicate give the same data.
	for range 2 {
		r.send(header.OpRCReadRequest, 1002, 0, rethTo(0, 8))
		op, psn, _, data := r.response()
		require.Equal(t, header.OpRCReadResponseOnly, op)
		require.Equal(t, header.PSN(1002), psn)
		require.Equal(t, "ZBCDEFGH", string(data))
	}
	// A three-packet READ, then a retry of its last two packets, as a
	// requester that lost the MIDDLE response sends it: the replay goes on
	// with MIDDLE and LAST, like rxe's.
	fill(g.whole[guardLen:guardLen+4096], 9)
	for _, c := range []struct {
		psn header.PSN
		off uint64
		ops []header.Opcode
	}{
		{1003, 0, []header.Opcode{header.OpRCReadResponseFirst, header.OpRCReadResponseMiddle, header.OpRCReadResponseLast}},
		{1004, 1024, []header.Opcode{header.OpRCReadResponseMiddle, header.OpRCReadResponseLast}},
	} {
		r.send(header.OpRCReadRequest, c.psn, 0, rethTo(c.off, uint32(2500-c.off)))
		for i, want := range c.ops {
			op, psn, _, data := r.response()
			require.Equal(t, want, op)
			require.Equal(t, c.psn.Add(uint32(i)), psn)
			start := guardLen + int(c.off) + i*1024
			require.Equal(t, g.whole[start:start+len(data)], data)
		}
	}
	r.silent()
	g.orig = append(g.orig[:0], g.whole...)
	// A SEND with no receive posted gets an RNR NAK with the QP's timer.
	r.send(header.OpRCSendOnly, 1006, 4, nil)
	_, psn, syn, _ = r.response()
	require.Equal(t, header.PSN(1006), psn)
	require.Equal(t, header.RNRNAKSyndrome(1), syn)
	require.Equal(t, verbs.QPSRTR, r.victim.qp.State())
	// Garbage never panics: random bytes after a valid BTH, random opcodes.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		op := header.Opcode(rng.IntN(0x18))
		if !op.Valid() || op.Info().Kind == header.KindSend && i%2 == 0 {
			continue
		}
		size := 0
		if op.Info().HasPayload {
			size = rng.IntN(1100)
		}
		r.send(op, header.PSN(1007+rng.IntN(3)), size, func(p *header.Packet) {
			for _, h := range [][]byte{p.RETH, p.AtomicETH, p.AETH, p.AtomicAckETH, p.ImmDt, p.IETH} {
				for j := range h {
					h[j] = byte(rng.Uint32())
				}
			}
			if p.RETH != nil && rng.IntN(2) == 0 {
				p.RETH.SetRKey(g.mr.RKey())
			}
		})
		r.link.Receive(func([]byte) {}, 64)
	}
	// Whatever the garbage did inside the permitted region, the guards hold.
	require.Equal(t, g.orig[:guardLen], g.whole[:guardLen])
	require.Equal(t, g.orig[guardLen+4096:], g.whole[guardLen+4096:])
}

func TestRKeysAreUnpredictable(t *testing.T) {
	p := newPair(t, memlink.Config{})
	pd := p.a.AllocPD()
	buf := make([]byte, 64)
	const n = 2000
	seen := map[uint32]bool{}
	var prev uint32
	var ones [32]int
	sequential := 0
	for i := range n {
		mr, err := pd.RegMR(buf, allAccess)
		require.NoError(t, err)
		k := mr.RKey()
		require.False(t, seen[k], "rkey %#x repeated", k)
		require.NotEqual(t, mr.LKey(), k)
		seen[k] = true
		if i > 0 && (k-prev < 256 || prev-k < 256) {
			sequential++
		}
		prev = k
		for b := range 32 {
			ones[b] += int(k >> b & 1)
		}
		require.NoError(t, mr.Dereg())
	}
	require.Less(t, sequential, 5, "rkeys close to the previous one")
	// Every bit of the key is set about half the time: all 32 bits vary.
	for b, c := range ones {
		require.InDelta(t, n/2, c, n/8, "bit %d set %d times of %d", b, c, n)
	}
}

// TestHostileResponder answers a verbs requester with malformed responses:
// too much READ data, responses of the wrong kind or for PSNs never sent.
// None may write outside the READ's SGL or complete the READ wrongly.
func TestHostileResponder(t *testing.T) { forEachMode(t, testHostileResponder) }

func testHostileResponder(t *testing.T, m mode) {
	r := newRawPeer(t, m, allAccess)
	v := r.victim
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 5000, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	g := newGuarded(t, v.pd, 4096, allAccess, 1)
	// READ 100 bytes into the middle of the region.
	require.NoError(t, v.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{g.mr.SGE(1000, 100)}, RemoteAddr: 0x10000, RKey: 0x1234}))
	op, psn, _, _ := r.response()
	require.Equal(t, header.OpRCReadRequest, op)
	require.Equal(t, header.PSN(5000), psn)
	resp := func(op header.Opcode, psn header.PSN, n int, b byte) {
		r.send(op, psn, n, func(p *header.Packet) {
			if p.AETH != nil {
				p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
			}
			for i := range p.Payload {
				p.Payload[i] = b
			}
		})
	}
	resp(header.OpRCReadResponseOnly, 5000, 1024, 0xaa)              // too long
	resp(header.OpRCReadResponseOnly, 5000, 50, 0xab)                // too short
	resp(header.OpRCReadResponseFirst, 5000, 1024, 0xac)             // FIRST of a one-packet READ
	resp(header.OpRCAtomicAcknowledge, 5000, 0, 0)                   // wrong kind
	resp(header.OpRCReadResponseOnly, 5001, 100, 0xad)               // PSN never sent
	r.send(header.OpRCAcknowledge, 5003, 0, func(p *header.Packet) { // ACK far ahead
		p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
	})
	noWC(t, v.scq)
	g.unchanged(t)
	require.GreaterOrEqual(t, r.engine.Counters().RxBadResponse.Load(), uint64(5))
	// The right response completes the READ, placing exactly 100 bytes.
	resp(header.OpRCReadResponseOnly, 5000, 100, 0xee)
	waitOK(t, v.scq, 1)
	for i := range 100 {
		g.orig[guardLen+1000+i] = 0xee
	}
	g.unchanged(t)
	// A NAK with an error fails the next work request with its status.
	require.NoError(t, v.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{g.mr.SGE(0, 10)}, RemoteAddr: 0x10000, RKey: 0x1234}))
	_, psn, _, _ = r.response()
	r.send(header.OpRCAcknowledge, psn, 0, func(p *header.Packet) {
		p.AETH.SetSyndrome(header.NAKSyndrome(header.NAKRemoteOperationalError))
	})
	wc := waitWC(t, v.scq)
	require.Equal(t, uint64(2), wc.WRID)
	require.Equal(t, verbs.WCRemOpErr, wc.Status)
	g.unchanged(t)
}

// TestLocalErrorAloneCompletes posts one RDMA READ whose local SGE runs past
// its MR, and nothing else: the requester fails it while sending, and its
// LOC_PROT_ERR completion must come though no packet, timer or post ever
// brings the engine back to the QP.
func TestLocalErrorAloneCompletes(t *testing.T) {
	_, x, y := connectedPair(t, memlink.Config{}, defaultOpts())
	local, _ := regMR(t, x.pd, 100, allAccess)
	remote, _ := regMR(t, y.pd, 4096, allAccess)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 7, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: local.Addr(), Length: 200, LKey: local.LKey()}},
		RemoteAddr: remote.Addr(), RKey: remote.RKey()}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	n, err := x.scq.Wait(ctx, wc[:])
	require.NoError(t, err, "the failed READ never completed")
	require.Equal(t, 1, n)
	assert.Equal(t, uint64(7), wc[0].WRID)
	assert.Equal(t, verbs.WCLocProtErr, wc[0].Status)
}
