package rdmacm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestAttachQP connects a QP the program made itself (as the daemon lends
// its clients' QPs to their IDs): the ID moves it to INIT, connects it,
// and on Destroy moves it to ERR and leaves it to the program.
func TestAttachQP(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	srvAddr := netip.AddrPortFrom(addrB, 7190)
	_, lch := listen(t, b, srvAddr)

	ch := a.cm.NewEventChannel()
	id, err := a.cm.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	cq, err := a.dev.CreateCQ(16, nil)
	require.NoError(t, err)
	qp, err := a.dev.AllocPD().CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	assert.ErrorIs(t, id.AttachQP(qp), rdmacm.ErrState, "no device before the address is resolved")
	require.NoError(t, id.ResolveAddr(netip.Addr{}, srvAddr, time.Second))
	nextEvent(t, ch, rdmacm.EventAddrResolved)
	require.NoError(t, id.ResolveRoute(time.Second))
	nextEvent(t, ch, rdmacm.EventRouteResolved)
	require.NoError(t, id.AttachQP(qp))
	assert.Equal(t, verbs.QPSInit, qp.State())
	assert.Same(t, qp, id.QP())
	assert.ErrorIs(t, id.AttachQP(qp), rdmacm.ErrState, "one QP per ID")
	require.NoError(t, id.Connect(&rdmacm.ConnParam{RNRRetryCount: 7}))
	accept(t, lch, &rdmacm.ConnParam{RNRRetryCount: 7})
	nextEvent(t, ch, rdmacm.EventEstablished)
	nextEvent(t, lch, rdmacm.EventEstablished)
	assert.Equal(t, verbs.QPSRTS, qp.State())

	require.NoError(t, id.Destroy())
	assert.Equal(t, verbs.QPSErr, qp.State(), "the connection is gone")
	nextEvent(t, lch, rdmacm.EventDisconnected)
	require.NoError(t, qp.Destroy(), "the QP is still the program's")
}
