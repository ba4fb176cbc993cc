package rdmacmtest

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// mcastEnd is a UD ID that joined a group, with its QP, CQ and a region
// of receives (slots of 256 bytes; the last one sends).
type mcastEnd struct {
	id *rdmacm.ID
	ch *rdmacm.EventChannel
	pd *verbs.PD
	qp *verbs.QP
	cq *verbs.CQ
	mr *verbs.MR
	ud *rdmacm.UDParam
}

const mcastSlot = 256

// joinMcast makes an ID of c at src, resolved to group as mckey does,
// gives it a UD QP with receives posted, and joins it to group.
func joinMcast(t *testing.T, c *rdmacm.CM, src, group netip.Addr, flags rdmacm.JoinFlags) *mcastEnd {
	const timeout = 20 * time.Second
	ch := c.NewEventChannel()
	id, err := c.CreateID(ch, rdmacm.PortSpaceUDP)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(src, netip.AddrPortFrom(group, 0), time.Second))
	NextEvent(t, ch, rdmacm.EventAddrResolved, timeout)
	dev := id.Device()
	cq, err := dev.CreateCQ(16, nil)
	require.NoError(t, err)
	pd := dev.AllocPD()
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 9*mcastSlot), verbs.AccessLocalWrite)
	require.NoError(t, err)
	for i := range 8 {
		require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*mcastSlot, mcastSlot)}}))
	}
	require.NoError(t, id.JoinMulticast(group, flags))
	ev := NextEvent(t, ch, rdmacm.EventMulticastJoin, timeout)
	assert.Equal(t, group, ev.Group)
	require.NotNil(t, ev.UD)
	assert.Equal(t, rdmacm.McastGID(group), ev.UD.AV.DGID, "the group's GID: its address, IPv4 mapped")
	assert.Equal(t, uint32(ibv.MulticastQPN), ev.UD.QPN)
	assert.Equal(t, uint32(rdmacm.UDPQKey), ev.UD.QKey)
	assert.Equal(t, uint8(rdmacm.McastHopLimit), ev.UD.AV.HopLimit)
	return &mcastEnd{id: id, ch: ch, pd: pd, qp: qp, cq: cq, mr: mr, ud: ev.UD}
}

// send sends a datagram of n bytes to the group, as the event says.
func (e *mcastEnd) send(t *testing.T, id uint64, n int) {
	ah, err := e.pd.CreateAH(&e.ud.AV)
	require.NoError(t, err)
	buf := e.mr.Bytes()[8*mcastSlot:]
	for i := range n {
		buf[i] = byte(id) + byte(i)
	}
	require.NoError(t, e.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{e.mr.SGE(8*mcastSlot, n)}, AH: ah, RemoteQPN: e.ud.QPN, RemoteQKey: e.ud.QKey}))
	wc := WaitWC(t, e.cq, 20*time.Second)
	require.Equal(t, id, wc.WRID)
	require.NoError(t, ah.Destroy())
}

// recv waits for e's receive in slot of n bytes from src.
func (e *mcastEnd) recv(t *testing.T, src *mcastEnd, slot, id uint64, n int) {
	wc := WaitWC(t, e.cq, 20*time.Second)
	require.Equal(t, slot, wc.WRID)
	assert.Equal(t, src.qp.QPN(), wc.SrcQP)
	assert.Equal(t, uint32(verbs.GRHLen+n), wc.ByteLen)
	got := e.mr.Bytes()[int(slot)*mcastSlot+verbs.GRHLen:][:n]
	for i := range n {
		if got[i] != byte(id)+byte(i) {
			t.Fatalf("byte %d of datagram %d: %#x", i, id, got[i])
		}
	}
}

// noRecv checks that e received nothing (after the others did).
func (e *mcastEnd) noRecv(t *testing.T) {
	var wc [1]verbs.WC
	n, err := e.cq.Poll(wc[:])
	require.NoError(t, err)
	assert.Zero(t, n, "a datagram for a QP not in the group: %+v", wc[0])
}

// Multicast runs rdma_cm's multicast between two CMs, as mckey and
// rdma-core's test_rdmacm do: two IDs of recvCM at recvAddr and one of
// sendCM at sendAddr join group, and a send-only ID of sendCM sends to
// it: each member, the one on the sender's own device too, gets every
// datagram once, until it leaves; then the join's refusals.
func Multicast(t *testing.T, sendCM, recvCM *rdmacm.CM, sendAddr, recvAddr netip.Addr) {
	group := netip.MustParseAddr("239.86.0.7")
	r1 := joinMcast(t, recvCM, recvAddr, group, rdmacm.JoinFullMember)
	r2 := joinMcast(t, recvCM, recvAddr, group, rdmacm.JoinFullMember)
	local := joinMcast(t, sendCM, sendAddr, group, rdmacm.JoinFullMember)
	s := joinMcast(t, sendCM, sendAddr, group, rdmacm.JoinSendOnlyFullMember)
	s.send(t, 100, 200)
	for _, r := range []*mcastEnd{r1, r2, local} {
		r.recv(t, s, 0, 100, 200)
	}
	s.noRecv(t)

	require.NoError(t, r2.id.LeaveMulticast(group))
	assert.ErrorIs(t, r2.id.LeaveMulticast(group), rdmacm.ErrNoDevice, "left already")
	s.send(t, 101, 64)
	r1.recv(t, s, 1, 101, 64)
	local.recv(t, s, 1, 101, 64)
	r2.noRecv(t)

	assert.ErrorIs(t, r1.id.JoinMulticast(group, rdmacm.JoinFullMember), rdmacm.ErrAddrInUse, "joined already")
	assert.ErrorIs(t, r1.id.JoinMulticast(recvAddr, rdmacm.JoinFullMember), rdmacm.ErrInvalidArgument, "not a group")
	tcp, err := recvCM.CreateID(r1.ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, tcp.Bind(netip.AddrPortFrom(recvAddr, 0)))
	assert.True(t, errors.Is(tcp.JoinMulticast(group, 0), rdmacm.ErrInvalidArgument), "a TCP ID")
	require.NoError(t, tcp.Destroy())

	// Destroying an ID leaves its groups.
	require.NoError(t, r1.id.Destroy())
	s.send(t, 102, 32)
	local.recv(t, s, 2, 102, 32)
}
