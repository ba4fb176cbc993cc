package ibtransport

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// linkedGroups are two devices' engine groups joined by an in-memory link:
// what engine k of one side sends is received by engine k of the other, as
// between veth ends whose queues pair up. The test drives every engine
// itself (pump), so packets move only between passes.
type linkedGroups struct {
	sides [2]linkedSide
}

type linkedSide struct {
	g     *Group
	ports []*fakePort
	gid   ibv.GID
}

func newLinkedGroups(engines int) *linkedGroups {
	l := &linkedGroups{}
	for s := range l.sides {
		side := &l.sides[s]
		ports := make([]Port, engines)
		wakes := make([]func(), engines)
		for k := range ports {
			p := &fakePort{keep: true}
			side.ports = append(side.ports, p)
			ports[k] = p
			wakes[k] = func() {}
		}
		side.g = NewGroup(ports, wakes)
		for _, e := range side.g.Engines() {
			e.Exit() // no engine goroutines: calls run inline
		}
		side.gid = ibv.GID{0: 0xfe, 15: byte(s + 1)}
	}
	return l
}

// pump runs passes of every engine and carries their packets across the
// link until no engine has anything left to send.
func (l *linkedGroups) pump(t *testing.T) {
	t.Helper()
	for round := 0; ; round++ {
		require.Less(t, round, 10000, "the engines never went quiet")
		moved, busy := false, false
		for s := range l.sides {
			for _, e := range l.sides[s].g.Engines() {
				b, _ := e.Process()
				busy = busy || b
			}
		}
		for s := range l.sides {
			from, to := &l.sides[s], &l.sides[1-s]
			info := RecvInfo{SGID: from.gid, DGID: to.gid}
			for k, p := range from.ports {
				for _, pkt := range p.sent {
					to.g.Engines()[k].Receive(pkt, &info)
					moved = true
				}
				p.sent = nil
			}
		}
		if !moved && !busy {
			return
		}
	}
}

// activeQPs counts the QPs on the active lists of both sides' engines:
// those the engines visit on every pass.
func (l *linkedGroups) activeQPs() int {
	n := 0
	for s := range l.sides {
		for _, e := range l.sides[s].g.Engines() {
			n += len(e.active)
		}
	}
	return n
}

// idleEngine reports whether an engine on either side has no QP.
func (l *linkedGroups) idleEngine() bool {
	for s := range l.sides {
		for _, e := range l.sides[s].g.Engines() {
			if e.nQPs.Load() == 0 {
				return true
			}
		}
	}
	return false
}

// connect creates a QP on each side, with mr as its memory and cq as both
// of its CQs, and moves both through INIT and RTR to RTS, each aimed at
// the other.
func (l *linkedGroups) connect(t *testing.T, mr [2]*testRegion, cq [2]*testCQ) [2]*QP {
	t.Helper()
	var qps [2]*QP
	for s := range qps {
		q, err := l.sides[s].g.CreateQP(&QPConfig{Memory: &testMemory{mr[s]}, SendCQ: cq[s], RecvCQ: cq[s],
			Cap: ibv.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteWrite | ibv.AccessRemoteRead | ibv.AccessRemoteAtomic},
			ibv.QPAttrState|ibv.QPAttrAccessFlags))
		qps[s] = q
	}
	psn := [2]header.PSN{0x123456, 0xabcdef}
	for s, q := range qps {
		require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU1024, DestQPN: qps[1-s].QPN(), RQPSN: psn[1-s],
			MaxDestRdAtomic: 16, MinRNRTimer: 1, AV: ibv.AddressVector{DGID: l.sides[1-s].gid, HopLimit: 64}},
			ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	}
	for s, q := range qps {
		require.NoError(t, q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: psn[s], Timeout: 8, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	}
	return qps
}

// TestQuietQPsLeaveEngineLoop checks that the engines stop visiting QPs
// that have nothing to do: connecting puts QPs on the active lists, and
// they leave once connected; each kind of data operation brings a QP pair
// back, and once it completed (ACKs in, no timer left) the lists are empty
// again.
func TestQuietQPsLeaveEngineLoop(t *testing.T) {
	l := newLinkedGroups(2)
	const size, guard = 100_000, 64
	var mr [2]*testRegion
	var cq [2]*testCQ
	for s := range mr {
		mr[s] = newTestRegion(make([]byte, size+2*guard), uint32(0x100+s), ibv.AccessAll)
		cq[s] = &testCQ{}
	}
	qp := l.connect(t, mr, cq)
	// Eight more pairs, and more until every engine has QPs (where a pair
	// goes depends on its random QP numbers).
	for n := 0; n < 8 || l.idleEngine(); n++ {
		require.Less(t, n, 64, "every pair went to the same engine")
		l.connect(t, mr, [2]*testCQ{{}, {}})
	}
	require.NotZero(t, l.activeQPs(), "connecting put no QP on an active list")
	l.pump(t)
	require.Zero(t, l.activeQPs(), "connected QPs with nothing to do stay active")

	x, y := qp[0], qp[1]
	for i, op := range []ibv.WROpcode{ibv.WRSend, ibv.WRRDMAWrite, ibv.WRRDMAWriteWithImm, ibv.WRRDMARead, ibv.WRAtomicCmpAndSwp, ibv.WRAtomicFetchAndAdd} {
		id := uint64(i + 1)
		src, dst := mr[0].buf, mr[1].buf
		if op == ibv.WRRDMARead {
			src, dst = dst, src
		}
		for j := range src {
			src[j], dst[j] = byte(i+j), ^byte(i+j)
		}
		n := size
		if op.IsAtomic() {
			n = 8
		}
		want := append([]byte(nil), dst...)
		copy(want[guard:guard+n], src[guard:guard+n])
		wr := ibv.SendWR{ID: id, Opcode: op, Flags: ibv.SendSignaled, SGL: []ibv.SGE{mr[0].SGE(guard, n)},
			RemoteAddr: mr[1].Addr() + guard, RKey: mr[1].RKey()}
		switch op {
		case ibv.WRSend:
			require.NoError(t, y.PostRecv(&ibv.RecvWR{ID: id, SGL: []ibv.SGE{mr[1].SGE(guard, n)}}))
		case ibv.WRRDMAWriteWithImm:
			wr.Imm = 7
			require.NoError(t, y.PostRecv(&ibv.RecvWR{ID: id}))
		case ibv.WRAtomicCmpAndSwp:
			wr.CompareAdd, wr.Swap = binary.NativeEndian.Uint64(dst[guard:]), 0x1122334455667788
			want = append([]byte(nil), dst...)
			binary.NativeEndian.PutUint64(want[guard:], wr.Swap)
		case ibv.WRAtomicFetchAndAdd:
			wr.CompareAdd = 5
			want = append([]byte(nil), dst...)
			binary.NativeEndian.PutUint64(want[guard:], binary.NativeEndian.Uint64(dst[guard:])+5)
		}
		old := binary.NativeEndian.Uint64(dst[guard:])
		require.NoError(t, x.PostSend(&wr))
		l.pump(t)
		require.Len(t, cq[0].wcs, 1, "%v", op)
		require.Equal(t, ibv.WCSuccess, cq[0].wcs[0].Status, "%v", op)
		require.Equal(t, id, cq[0].wcs[0].WRID, "%v", op)
		cq[0].wcs = nil
		if op == ibv.WRSend || op == ibv.WRRDMAWriteWithImm {
			require.Len(t, cq[1].wcs, 1, "%v", op)
			require.Equal(t, ibv.WCSuccess, cq[1].wcs[0].Status, "%v", op)
			require.Equal(t, uint32(n), cq[1].wcs[0].ByteLen, "%v", op)
			cq[1].wcs = nil
		}
		if op.IsAtomic() {
			// The atomic's response carries the old value into src.
			require.Equal(t, old, binary.NativeEndian.Uint64(src[guard:]), "%v", op)
		}
		require.Equal(t, want, dst, "%v", op)
		require.Zero(t, l.activeQPs(), "QPs stay active after %v completed", op)
	}
}
