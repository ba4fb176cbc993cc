package daemon_test

import (
	"net/netip"
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

// TestMcastLimit: a user's attachments stop at McastAttachments
// (ENOMEM), attaching a group twice takes nothing more, a detach gives
// one back, and destroying the QP gives back the rest.
func TestMcastLimit(t *testing.T) {
	uid := uint32(os.Geteuid())
	r := newRigLimited(t, daemon.Limits{McastAttachments: 2})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	q, err := c.CreateQP(hostif.CreateQPRequest{PD: pd, Type: uint32(ibv.QPTypeUD), SendCQ: cq.Handle, RecvCQ: cq.Handle,
		MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, err)
	group := func(i byte) ibv.GID { return netip.AddrFrom4([4]byte{239, 0, 0, i}).As16() }
	require.NoError(t, q.AttachMcast(group(1), 0))
	require.NoError(t, q.AttachMcast(group(1), 0), "attached already")
	require.NoError(t, q.AttachMcast(group(2), 0))
	require.Equal(t, unix.ENOMEM, errnoOf(t, q.AttachMcast(group(3), 0)), "a third group")
	require.Equal(t, unix.EINVAL, errnoOf(t, q.AttachMcast(netip.MustParseAddr("::ffff:10.0.0.1").As16(), 0)), "not a group")
	require.NoError(t, q.DetachMcast(group(1), 0))
	require.Equal(t, unix.EINVAL, errnoOf(t, q.DetachMcast(group(1), 0)), "detached already")
	require.NoError(t, q.AttachMcast(group(3), 0), "one given back is one to take again")
	require.Equal(t, 2, r.srv.Usage(uid).McastAttachments)
	require.NoError(t, q.Destroy())
	require.Eventually(t, func() bool { return r.srv.Usage(uid).McastAttachments == 0 }, 10*time.Second, 10*time.Millisecond,
		"given back with the QP: %+v", r.srv.Usage(uid))
}
