package xdplink_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/verbs"
)

// udSide is a UD QP of an xdpSide with a buffer of receive slots and a
// send slot after them.
type udSide struct {
	*xdpSide
	mr   *verbs.MR
	buf  []byte
	slot int
}

const udXDPQKey = 0x22222222

func newUDSide(t *testing.T, s *xdpSide, slots, slot int) *udSide {
	s.createQP(t, &verbs.QPInitAttr{Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: slots}})
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: udXDPQKey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 7}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	u := &udSide{xdpSide: s, buf: make([]byte, (slots+1)*slot), slot: slot}
	var err error
	u.mr, err = s.pd.RegMR(u.buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	for i := range slots {
		u.postRecv(t, i)
	}
	return u
}

func (u *udSide) postRecv(t *testing.T, i int) {
	require.NoError(t, u.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{u.mr.SGE(i*u.slot, u.slot)}}))
}

// sendTo sends n bytes of the send slot to peer's QP through ah.
func (u *udSide) sendTo(t *testing.T, ah *verbs.AH, peer uint32, id uint64, n int) {
	off := len(u.buf) - u.slot
	require.NoError(t, u.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
		Imm: uint32(id), SGL: []verbs.SGE{u.mr.SGE(off, n)}, AH: ah, RemoteQPN: peer, RemoteQKey: udXDPQKey}))
}

// TestUDOverXDP moves UD messages both ways between two softnic devices
// over AF_XDP, over IPv4 and IPv6 GIDs: each message of the active MTU
// arrives behind a GRH that holds the IP header, and the answer goes back
// through an AH made from the completion.
func TestUDOverXDP(t *testing.T) {
	netnstest.Integration(t)
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			pair := netnstest.NewT(t, netnstest.Config{MTU: 1500})
			const size, count = 1024, 64
			x := newUDSide(t, openXDPSide(t, &pair.A), 16, size+verbs.GRHLen)
			y := newUDSide(t, openXDPSide(t, &pair.B), 16, size+verbs.GRHLen)
			addr := func(s *udSide) netip.Addr { return sideAddr(s.xdpSide, v6) }
			resolvePeers(t, x.xdpSide, y.xdpSide, v6)
			peerGID, err := y.dev.GID(gidIndex(t, y.xdpSide, addr(y)))
			require.NoError(t, err)
			ah, err := x.pd.CreateAH(&verbs.AddressVector{DGID: peerGID, SGIDIndex: uint8(gidIndex(t, x.xdpSide, addr(x))), HopLimit: 64})
			require.NoError(t, err)
			for i := range count {
				pattern(x.buf[len(x.buf)-x.slot:][:size], byte(i))
				x.sendTo(t, ah, y.qp.QPN(), uint64(i), size)
				waitWC(t, x.scq, uint64(i))
				wc := waitWC(t, y.rcq, uint64(i%16))
				require.Equal(t, uint32(verbs.GRHLen+size), wc.ByteLen)
				require.Equal(t, uint32(i), wc.Imm)
				require.Equal(t, x.qp.QPN(), wc.SrcQP)
				slot := y.buf[(i%16)*y.slot : (i%16+1)*y.slot]
				require.Equal(t, x.buf[len(x.buf)-x.slot:][:size], slot[verbs.GRHLen:])
				if v6 {
					assert.Equal(t, verbs.NetworkIPv6, wc.NetworkHdrType)
					assert.Equal(t, addr(x).As16(), [16]byte(slot[8:24]))
				} else {
					assert.Equal(t, verbs.NetworkIPv4, wc.NetworkHdrType)
					assert.Equal(t, addr(x).As4(), [4]byte(slot[32:36]))
				}
				// The answer, to the sender found from the GRH.
				back, err := y.pd.CreateAHFromWC(&wc, slot)
				require.NoError(t, err)
				copy(y.buf[len(y.buf)-y.slot:], slot[verbs.GRHLen:])
				y.postRecv(t, i%16)
				y.sendTo(t, back, wc.SrcQP, uint64(i), size)
				waitWC(t, y.scq, uint64(i))
				wc = waitWC(t, x.rcq, uint64(i%16))
				require.Equal(t, y.qp.QPN(), wc.SrcQP)
				xs := x.buf[(i%16)*x.slot : (i%16+1)*x.slot]
				require.Equal(t, slot[verbs.GRHLen:], xs[verbs.GRHLen:])
				x.postRecv(t, i%16)
			}
			for _, s := range []*udSide{x, y} {
				c := s.dev.Counters()
				assert.Zero(t, c.RxNoRecv.Load()+c.RxBadQKey.Load()+c.RxFiltered.Load(), "%s: drops", s.end.Namespace)
			}
		})
	}
}
