package daemon_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// Memory windows count against the user's bound; a window's PD is not
// deallocated under it, an unknown type is EINVAL, and a session's end
// gives its windows back.
func TestMWLimitAndLifetime(t *testing.T) {
	uid := uint32(os.Geteuid())
	r := newRigLimited(t, daemon.Limits{MWs: 1})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	pd, err := c.AllocPD()
	require.NoError(t, err)
	_, _, err = c.AllocMW(pd, 3)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "type 3")
	mw, rkey, err := c.AllocMW(pd, ibv.MWType2)
	require.NoError(t, err)
	require.NotZero(t, rkey>>8, "a key index")
	_, _, err = c.AllocMW(pd, ibv.MWType1)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "one window per user")
	require.Equal(t, unix.EBUSY, errnoOf(t, c.DeallocPD(pd)), "the window is in the PD")
	require.NoError(t, c.DeallocMW(mw))
	require.Equal(t, unix.ENOENT, errnoOf(t, c.DeallocMW(mw)), "deallocated twice")
	_, _, err = c.AllocMW(pd, ibv.MWType1)
	require.NoError(t, err, "the bound gives one back")
	c.Close()
	require.Eventually(t, func() bool { return r.srv.Usage(uid) == daemon.Usage{} }, 10*time.Second, 10*time.Millisecond,
		"all given back: %+v", r.srv.Usage(uid))
}
