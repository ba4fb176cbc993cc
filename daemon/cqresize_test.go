package daemon_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	hostsession "github.com/softnic/softnic/daemon/client/session"
)

// resize_cq counts the new ring against the user's ring bytes before it
// gives the old one back, so a resize past the bound fails (ENOMEM) and
// leaves the CQ as it was; entries out of range and unknown CQs fail as
// create_cq's do.
func TestResizeCQBounds(t *testing.T) {
	uid := uint32(os.Geteuid())
	const page, cq16, cq64 = 4096, 4096 + 16*64, 4096 + 64*64
	r := newRigLimited(t, daemon.Limits{RingBytes: page + cq16 + cq64})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	require.Equal(t, int64(page+cq16), r.srv.Usage(uid).RingBytes)

	require.NoError(t, cq.Resize(64), "old and new ring fit the bound together")
	require.Equal(t, 64, cq.Ring().Depth())
	require.Equal(t, int64(page+cq64), r.srv.Usage(uid).RingBytes, "the old ring was given back")

	require.Equal(t, unix.ENOMEM, errnoOf(t, cq.Resize(128)), "old and new over the bound")
	require.Equal(t, 64, cq.Ring().Depth())
	require.Equal(t, int64(page+cq64), r.srv.Usage(uid).RingBytes)

	require.Equal(t, unix.EINVAL, errnoOf(t, cq.Resize(0)))
	require.NoError(t, cq.Resize(9))
	require.Equal(t, 16, cq.Ring().Depth())
	require.Equal(t, int64(page+cq16), r.srv.Usage(uid).RingBytes)

	require.NoError(t, cq.Destroy())
	require.Equal(t, int64(page), r.srv.Usage(uid).RingBytes)
	require.Equal(t, unix.ENOENT, errnoOf(t, cq.Resize(16)), "a destroyed CQ")
}
