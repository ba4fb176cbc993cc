package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

var mcastGroup = verbs.GID(netip.MustParseAddr("::ffff:239.1.2.3").As16())

// mcastSend sends n bytes from u to the multicast group.
func (u *udEndpoint) mcastSend(t testing.TB, ah *verbs.AH, id uint64, n int) {
	t.Helper()
	u.send(t, ah, ibv.MulticastQPN, udQKey, id, n, verbs.WRSend, 0)
	waitOK(t, u.scq, id)
}

// checkMcastRecv waits for u's receive slot of the datagram from src.
func checkMcastRecv(t testing.TB, u, src *udEndpoint, slot uint64, n int) {
	t.Helper()
	wc := waitOK(t, u.rcq, slot)
	assert.Equal(t, src.qp.QPN(), wc.SrcQP)
	assert.Equal(t, u.qp.QPN(), wc.QPN)
	assert.Equal(t, uint32(verbs.GRHLen+n), wc.ByteLen)
	assert.Equal(t, verbs.WCWithGRH, wc.Flags)
	off := int(slot) * u.slot
	assert.Equal(t, src.buf[len(src.buf)-src.slot:][:n], u.buf[off+verbs.GRHLen:off+verbs.GRHLen+n])
	// The GRH's IPv4 header names the group as destination.
	assert.Equal(t, [4]byte{239, 1, 2, 3}, [4]byte(u.buf[off+20+16:off+20+20]))
}

// TestMcastSend sends datagrams to a group that two QPs of the receiving
// device and one of the sender's own device joined: each gets one copy;
// a QP of the group with another Q_Key and one not attached get none, and
// a detached QP gets none of the next.
func TestMcastSend(t *testing.T) { forEachMode(t, testMcastSend) }

func testMcastSend(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	const slot = 1024 + verbs.GRHLen
	a := newUDEndpoint(t, p.a, 4, slot, udQKey)
	local := newUDEndpoint(t, p.a, 4, slot, udQKey)
	b1 := newUDEndpoint(t, p.b, 4, slot, udQKey)
	b2 := newUDEndpoint(t, p.b, 4, slot, udQKey)
	otherKey := newUDEndpoint(t, p.b, 4, slot, udQKey+1)
	outside := newUDEndpoint(t, p.b, 4, slot, udQKey)
	for _, u := range []*udEndpoint{local, b1, b2, otherKey} {
		require.NoError(t, u.qp.AttachMcast(mcastGroup, 0))
	}
	for _, u := range []*udEndpoint{local, b1, b2, otherKey, outside} {
		u.postRecvs(t, 0, 4)
	}
	ah, err := a.pd.CreateAH(&verbs.AddressVector{DGID: mcastGroup, HopLimit: 1})
	require.NoError(t, err)
	fill(a.buf[len(a.buf)-slot:], 3)
	a.mcastSend(t, ah, 100, 700)
	for _, u := range []*udEndpoint{local, b1, b2} {
		checkMcastRecv(t, u, a, 0, 700)
	}
	require.NoError(t, b2.qp.DetachMcast(mcastGroup, 0))
	fill(a.buf[len(a.buf)-slot:], 4)
	a.mcastSend(t, ah, 101, 300)
	checkMcastRecv(t, b1, a, 1, 300)
	checkMcastRecv(t, local, a, 1, 300)
	for _, u := range []*udEndpoint{b2, otherKey, outside, a} {
		noWC(t, u.rcq)
	}
	assert.NotZero(t, p.engB.Counters().RxBadQKey.Load(), "the other Q_Key's QP refused the datagrams")

	// Destroying a QP detaches it: the group stays joined for b1 alone.
	require.NoError(t, otherKey.qp.Destroy())
	a.mcastSend(t, ah, 102, 64)
	checkMcastRecv(t, b1, a, 2, 64)
}

// TestMcastAttachChecks checks ibv_attach_mcast's and ibv_detach_mcast's
// refusals and the device's multicast limits.
func TestMcastAttachChecks(t *testing.T) { forEachMode(t, testMcastAttachChecks) }

func testMcastAttachChecks(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	attr := p.a.Query()
	assert.Equal(t, ibv.MaxMcastGroups, attr.MaxMcastGrp)
	assert.Equal(t, ibv.MaxMcastQPAttach, attr.MaxMcastQPAttach)
	assert.Equal(t, ibv.MaxMcastGroups*ibv.MaxMcastQPAttach, attr.MaxTotalMcastQPAttach)

	u := newUDEndpoint(t, p.a, 1, 64, udQKey)
	unicast := verbs.GID(netip.MustParseAddr("::ffff:10.0.0.9").As16())
	require.ErrorIs(t, u.qp.AttachMcast(unicast, 0), verbs.ErrInvalidArgument, "not a multicast GID")
	require.ErrorIs(t, u.qp.DetachMcast(mcastGroup, 0), verbs.ErrInvalidArgument, "not attached")
	require.NoError(t, u.qp.AttachMcast(mcastGroup, 0))
	require.NoError(t, u.qp.AttachMcast(mcastGroup, 0), "attached twice: nothing more")
	require.NoError(t, u.qp.DetachMcast(mcastGroup, 0))
	require.ErrorIs(t, u.qp.DetachMcast(mcastGroup, 0), verbs.ErrInvalidArgument, "detached already")
	v6 := verbs.GID(netip.MustParseAddr("ff0e::1234").As16())
	require.NoError(t, u.qp.AttachMcast(v6, 0), "an IPv6 group")
	require.NoError(t, u.qp.DetachMcast(v6, 0))

	rc := newEndpoint(t, p.a, nil, defaultOpts(), nil)
	require.ErrorIs(t, rc.qp.AttachMcast(mcastGroup, 0), verbs.ErrInvalidArgument, "an RC QP")
}

// TestMcastQPLimit attaches one QP more than a group takes.
func TestMcastQPLimit(t *testing.T) { forEachMode(t, testMcastQPLimit) }

func testMcastQPLimit(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	pd := p.a.AllocPD()
	cq, err := p.a.CreateCQ(16, nil)
	require.NoError(t, err)
	for i := 0; i <= ibv.MaxMcastQPAttach; i++ {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		require.NoError(t, err)
		err = qp.AttachMcast(mcastGroup, 0)
		if i < ibv.MaxMcastQPAttach {
			require.NoError(t, err, "QP %d", i)
		} else {
			require.ErrorIs(t, err, verbs.ErrMcastLimit)
		}
	}
}
