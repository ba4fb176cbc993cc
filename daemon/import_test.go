package daemon_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// What an importing context asks of its session's objects: a PD is
// there, a region's PD, keys, rights and length, a DM's length and its
// memory again (the same bytes as the first mapping's).
func TestImportQueries(t *testing.T) {
	r := newRig(t)
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	require.NoError(t, c.QueryPD(pd))
	buf := make([]byte, 3000)
	access := ibv.AccessLocalWrite | ibv.AccessRemoteRead
	mr, err := c.RegMR(pd, buf, access)
	require.NoError(t, err)
	got, err := c.QueryMR(mr.Handle)
	require.NoError(t, err)
	require.Equal(t, hostsession.ImportedMR{PD: pd, LKey: mr.LKey, RKey: mr.RKey, Access: access, Len: 3000}, got)

	dm, err := c.AllocDM(100, 0)
	require.NoError(t, err)
	dmr, err := c.RegDMMR(pd, dm.Handle, 0, 64, ibv.AccessZeroBased|ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	require.NoError(t, err)
	got, err = c.QueryMR(dmr.Handle)
	require.NoError(t, err)
	require.Equal(t, hostsession.ImportedMR{PD: pd, LKey: dmr.LKey, RKey: dmr.RKey,
		Access: ibv.AccessZeroBased | ibv.AccessLocalWrite | ibv.AccessRemoteWrite, Len: 64}, got)
	again, length, err := c.ImportDM(dm.Handle)
	require.NoError(t, err)
	require.Equal(t, uint64(100), length)
	copy(dm.Mem, "written through the first mapping")
	require.Equal(t, "written through the first mapping", string(again.Mem[:33]))
	require.NoError(t, again.Unmap())
}

// Handles the session does not have, another session's included, are
// ENOENT, and so are those of destroyed objects; a DM's kept memfd is
// one descriptor of the user's, given back when it is freed.
func TestImportRefusals(t *testing.T) {
	r := newRig(t)
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer other.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	mr, err := c.RegMR(pd, make([]byte, 64), ibv.AccessLocalWrite)
	require.NoError(t, err)
	uid := uint32(os.Geteuid())
	before := r.srv.Usage(uid).Descriptors
	dm, err := c.AllocDM(64, 0)
	require.NoError(t, err)
	require.Equal(t, before+1, r.srv.Usage(uid).Descriptors, "the DM's memfd")

	require.Equal(t, unix.ENOENT, errnoOf(t, other.QueryPD(pd)), "another session's PD")
	_, err = other.QueryMR(mr.Handle)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "another session's MR")
	_, _, err = other.ImportDM(dm.Handle)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "another session's DM")
	_, err = c.QueryMR(pd)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "a PD's handle is no MR")
	require.Equal(t, unix.ENOENT, errnoOf(t, c.QueryPD(mr.Handle)), "an MR's handle is no PD")

	require.NoError(t, c.DeregMR(mr.Handle))
	_, err = c.QueryMR(mr.Handle)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "a deregistered MR")
	require.NoError(t, c.FreeDM(dm.Handle))
	require.NoError(t, dm.Unmap())
	_, _, err = c.ImportDM(dm.Handle)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "a freed DM")
	require.Equal(t, before, r.srv.Usage(uid).Descriptors, "the memfd was given back")
	require.NoError(t, c.DeallocPD(pd))
	require.Equal(t, unix.ENOENT, errnoOf(t, c.QueryPD(pd)), "a deallocated PD")
}
