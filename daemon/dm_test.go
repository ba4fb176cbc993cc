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
	"github.com/softnic/softnic/verbs"
)

// The host interface's device memory is the Go API's.
func TestDMSizeAgrees(t *testing.T) {
	require.Equal(t, uint64(verbs.MaxDMSize), uint64(hostif.MaxDMSize))
	require.Equal(t, verbs.DMMaxLogAlign, int(hostif.DMMaxLogAlign))
}

// A user's device memory is bounded in allocations and bytes, and a
// session's end gives back what it held.
func TestDMUserBounds(t *testing.T) {
	r := newRigLimited(t, daemon.Limits{DMs: 2, DMBytes: 8192})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	dm, err := c.AllocDM(8192, 0)
	require.NoError(t, err)
	_, err = c.AllocDM(4, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "bytes")
	require.NoError(t, c.FreeDM(dm.Handle))
	require.NoError(t, dm.Unmap())
	for range 2 {
		_, err = c.AllocDM(4, 0)
		require.NoError(t, err)
	}
	_, err = c.AllocDM(4, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "allocations")
	c.Close()
	waitDMs(t, r, 0)
	c, err = hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.AllocDM(8192, 0)
	require.NoError(t, err, "the ended session's allocations were given back")
}

// The device's memory is every user's: past it, ENOMEM, whatever the
// user's own bound; a session's end gives it back.
func TestDMDeviceBound(t *testing.T) {
	r := newRigLimited(t, daemon.Limits{DMBytes: -1})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer other.Close()
	_, err = c.AllocDM(hostif.MaxDMSize-4, 0)
	require.NoError(t, err)
	_, err = other.AllocDM(8, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err))
	_, err = other.AllocDM(4, 0)
	require.NoError(t, err)
	c.Close()
	waitDMs(t, r, 1)
	dm, err := other.AllocDM(hostif.MaxDMSize-4, 0)
	require.NoError(t, err)
	require.NoError(t, other.FreeDM(dm.Handle))
}

// Bad requests are refused and change nothing: sizes, alignments, ranges
// that wrap or pass the allocation's end, rights, handles of other
// sessions, a free while a region is in it; the memfd cannot be resized.
func TestDMRefusals(t *testing.T) {
	r := newRig(t)
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	for _, n := range []uint64{0, hostif.MaxDMSize + 1, 1 << 63} {
		_, err = c.AllocDM(n, 0)
		require.Equal(t, unix.EINVAL, errnoOf(t, err), "%d bytes", n)
	}
	_, err = c.AllocDM(64, hostif.DMMaxLogAlign+1)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "alignment")
	pd, err := c.AllocPD()
	require.NoError(t, err)
	dm, err := c.AllocDM(100, 0)
	require.NoError(t, err)
	zb := ibv.AccessZeroBased | ibv.AccessLocalWrite
	for _, bad := range []struct{ off, n uint64 }{{0, 104}, {101, 0}, {8, 96}, {1 << 63, 1 << 63}, {4, ^uint64(0)}} {
		_, err = c.RegDMMR(pd, dm.Handle, bad.off, bad.n, zb)
		require.Equal(t, unix.EINVAL, errnoOf(t, err), "%d bytes at %d", bad.n, bad.off)
	}
	_, err = c.RegDMMR(pd, dm.Handle, 0, 100, ibv.AccessLocalWrite)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "without ZERO_BASED")
	_, err = c.RegDMMR(pd, dm.Handle, 0, 100, zb|1<<20)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "unknown rights")
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer other.Close()
	opd, err := other.AllocPD()
	require.NoError(t, err)
	_, err = other.RegDMMR(opd, dm.Handle, 0, 100, zb)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "another session's DM")
	require.Equal(t, unix.ENOENT, errnoOf(t, other.FreeDM(dm.Handle)))

	mr, err := c.RegDMMR(pd, dm.Handle, 0, 100, zb)
	require.NoError(t, err)
	require.Equal(t, unix.EBUSY, errnoOf(t, c.FreeDM(dm.Handle)))
	require.NoError(t, c.DeregMR(mr.Handle))
	require.NoError(t, c.FreeDM(dm.Handle))
	require.Equal(t, unix.ENOENT, errnoOf(t, c.FreeDM(dm.Handle)), "freed twice")
}

// waitDMs waits for the daemon to have ended a closed session: its user
// then holds n allocations.
func waitDMs(t *testing.T, r *rig, n int) {
	uid := uint32(os.Geteuid())
	require.Eventually(t, func() bool { return r.srv.Usage(uid).DMs == n }, 10*time.Second, time.Millisecond,
		"%+v", r.srv.Usage(uid))
}
