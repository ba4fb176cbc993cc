package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestMcastSenderInGroup has the sender attached to the group it sends
// to, with no receive posted (mckey -s): its own copies are lost, and
// every datagram still leaves for the peer.
func TestMcastSenderInGroup(t *testing.T) { forEachMode(t, testMcastSenderInGroup) }

func testMcastSenderInGroup(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	const slot = 256 + verbs.GRHLen
	a := newUDEndpoint(t, p.a, 10, slot, udQKey)
	b := newUDEndpoint(t, p.b, 10, slot, udQKey)
	require.NoError(t, a.qp.AttachMcast(mcastGroup, 0))
	require.NoError(t, b.qp.AttachMcast(mcastGroup, 0))
	b.postRecvs(t, 0, 10)
	ah, err := a.pd.CreateAH(&verbs.AddressVector{DGID: mcastGroup, HopLimit: 1})
	require.NoError(t, err)
	for i := range 10 {
		a.send(t, ah, 0xFFFFFF, udQKey, uint64(i), 100, verbs.WRSend, 0)
	}
	for i := range 10 {
		waitOK(t, a.scq, uint64(i))
	}
	for i := range 10 {
		waitOK(t, b.rcq, uint64(i))
	}
}
