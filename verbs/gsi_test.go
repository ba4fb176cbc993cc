package verbs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestGSIDropsBadMADs sends QP1 datagrams that are no MAD it can take: each
// is dropped and counted where it failed, nothing answers, and QP1 goes on
// to take a good one (a REQ nobody listens for, which the CM rejects).
func TestGSIDropsBadMADs(t *testing.T) {
	p := newPair(t, memlink.Config{})
	// Its own Q_Key is QP1's: a work request's Q_Key with the high bit set
	// (GSIQKey has it) sends the QP's own.
	u := newUDEndpoint(t, p.a, 16, mad.Len+verbs.GRHLen, verbs.GSIQKey)
	gidB, err := p.b.GID(0)
	require.NoError(t, err)
	ah, err := u.pd.CreateAH(&verbs.AddressVector{DGID: gidB, HopLimit: 64})
	require.NoError(t, err)
	send := func(b []byte, qkey uint32) {
		t.Helper()
		copy(u.buf[len(u.buf)-u.slot:], b)
		u.send(t, ah, verbs.GSIQPN, qkey, 0, len(b), verbs.WRSend, 0)
		waitSendWC(t, u)
	}
	good := make([]byte, mad.Len)
	h := mad.Header(good[:mad.HeaderLen])
	h.SetBaseVersion(mad.BaseVersion)
	h.SetMgmtClass(mad.ClassCM)
	h.SetClassVersion(mad.CMClassVersion)
	h.SetMethod(mad.MethodSend)
	h.SetAttrID(mad.AttrREQ)
	req := mad.REQ(good)
	req.SetLocalCommID(0x1234)
	req.SetServiceID(mad.ServiceID(mad.PortSpaceTCP, 7174))
	req.SetLocalQPN(0x42)
	req.SetPathMTU(verbs.MTU1024)

	badBase := append([]byte(nil), good...)
	badBase[0] = 2
	otherClass := append([]byte(nil), good...)
	otherClass[1] = 0x04 // performance management
	badAttr := append([]byte(nil), good...)
	badAttr[16], badAttr[17] = 0x7f, 0x7f

	g, c := p.b.GSICounters(), p.b.CM().Counters()
	send(good[:100], verbs.GSIQKey) // too short: no MAD
	send(badBase, verbs.GSIQKey)    // base version 2
	send(otherClass, verbs.GSIQKey) // a class nobody serves here
	send(badAttr, verbs.GSIQKey)    // a CM MAD of no known attribute
	send(good, 0x11111111)          // the wrong Q_Key: the transport drops it
	require.Eventually(t, func() bool {
		return g.RxBadMAD.Load() == 2 && g.RxNoClass.Load() == 1 && c.BadAttribute.Load() == 1 &&
			p.b.Counters().RxBadQKey.Load() == 1
	}, 5*time.Second, time.Millisecond)
	assert.Zero(t, g.TxMADs.Load(), "nothing answers a bad MAD")

	send(good, verbs.GSIQKey)
	require.Eventually(t, func() bool { return c.RejectsSent.Load() == 1 && g.TxMADs.Load() == 1 }, 5*time.Second, time.Millisecond,
		"a REQ for a service nobody listens on is rejected")
	assert.Equal(t, uint64(2), g.RxMADs.Load(), "MADs handed to the CM: the bad attribute and the REQ")
}

func waitSendWC(t testing.TB, u *udEndpoint) {
	t.Helper()
	wcs := make([]verbs.WC, 1)
	require.Eventually(t, func() bool {
		n, err := u.scq.Poll(wcs)
		require.NoError(t, err)
		return n == 1
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, verbs.WCSuccess, wcs[0].Status)
}
