package daemon_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// TestFlowLimits: a user's raw packet QPs stop at RawQPs and flows at
// Flows (ENOMEM); bad specs get EINVAL or EOPNOTSUPP and take nothing; a
// QP with flows is EBUSY; the session's end gives everything back.
func TestFlowLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_NET_RAW")
	}
	uid := uint32(os.Geteuid())
	r := newRigLimited(t, daemon.Limits{RawQPs: 1, Flows: 2})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	req := hostif.CreateQPRequest{PD: pd, Type: uint32(ibv.QPTypeRawPacket), SendCQ: cq.Handle, RecvCQ: cq.Handle,
		MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	q, err := c.CreateQP(req)
	require.NoError(t, err)
	_, err = c.CreateQP(req)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "a second raw packet QP")
	udp := func(port uint16) *ibv.FlowAttr {
		return &ibv.FlowAttr{Port: 1, Specs: []ibv.FlowSpec{{Type: ibv.FlowSpecUDP,
			Port: ibv.PortFilter{DstPort: port}, PortMask: ibv.PortFilter{DstPort: 0xffff}}}}
	}
	_, err = q.CreateFlow(udp(1))
	require.NoError(t, err)
	f2, err := q.CreateFlow(udp(2))
	require.NoError(t, err)
	_, err = q.CreateFlow(udp(3))
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "a third flow")
	require.NoError(t, c.DestroyFlow(f2))
	require.Equal(t, unix.ENOENT, errnoOf(t, c.DestroyFlow(f2)), "destroyed already")

	bad, err := hostif.EncodeFlow(q.Handle, udp(4))
	require.NoError(t, err)
	bad.Specs[0].Size = 9
	_, err = c.CreateFlowRequest(bad)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "a spec shorter than its filters")
	bad.Specs[0].Type = 0x1000 // an action: not softnic's
	bad.Specs[0].Size = 16
	_, err = c.CreateFlowRequest(bad)
	require.Equal(t, unix.EOPNOTSUPP, errnoOf(t, err))
	require.Equal(t, 1, r.srv.Usage(uid).Flows)

	require.Equal(t, unix.EBUSY, errnoOf(t, q.Destroy()), "a QP with flows")
	c.Close()
	require.Eventually(t, func() bool { u := r.srv.Usage(uid); return u.Flows == 0 && u.RawQPs == 0 && u.QPs == 0 },
		10*time.Second, 10*time.Millisecond, "given back at the session's end: %+v", r.srv.Usage(uid))
	require.Zero(t, r.a.RoCE().Flows(), "the device's table is empty")
}
