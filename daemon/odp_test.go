package daemon_test

import (
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// What a client may ask of ODP, advise_mr and rereg_mr, and what it is
// refused, command by command: the daemon checks every field, and an ODP
// region is registered without its memory being there.
func TestODPCommands(t *testing.T) {
	r := newRig(t)
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)

	gone, err := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	at := uint64(uintptr(unsafe.Pointer(&gone[0])))
	require.NoError(t, unix.Munmap(gone))

	_, err = c.RegMRAt(pd, at, 8192, ibv.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EFAULT, "not mapped, not ODP")
	odp, err := c.RegMRAt(pd, at, 8192, ibv.AccessLocalWrite|ibv.AccessOnDemand)
	require.NoError(t, err, "an ODP region need not be mapped")
	_, err = c.RegMRAt(pd, 0, math.MaxUint64, ibv.AccessLocalWrite)
	require.ErrorIs(t, err, unix.EFAULT, "the whole address space without ODP")
	implicit, err := c.RegMRAt(pd, 0, math.MaxUint64, ibv.AccessLocalWrite|ibv.AccessOnDemand)
	require.NoError(t, err)

	sge := []ibv.SGE{{Addr: at, Length: 100, LKey: odp.LKey}}
	require.ErrorIs(t, c.AdviseMR(pd, 0, 1, sge), unix.EFAULT, "prefetch of unmapped pages")
	require.NoError(t, c.AdviseMR(pd, 0, 0, sge), "a queued prefetch's fault is not reported")
	require.NoError(t, c.AdviseMR(pd, 2, 1, sge), "NO_FAULT faults nothing")
	require.ErrorIs(t, c.AdviseMR(pd+100, 0, 1, sge), unix.ENOENT, "no such PD")
	require.ErrorIs(t, c.AdviseMR(pd, 7, 1, sge), unix.EOPNOTSUPP)
	require.ErrorIs(t, c.AdviseMR(pd, 0, 4, sge), unix.EINVAL)
	bad := []ibv.SGE{{Addr: at, Length: 1, LKey: odp.LKey ^ 1}}
	require.ErrorIs(t, c.AdviseMR(pd, 0, 1, bad), unix.ENOENT)
	require.ErrorIs(t, c.AdviseMR(pd, 0, 0, bad), unix.EINVAL)
	many := make([]ibv.SGE, 3*hostif.AdviseSGEs+1)
	for i := range many {
		many[i] = ibv.SGE{Addr: r.pmr.Addr(), Length: 1, LKey: implicit.LKey}
	}
	buf := make([]byte, 64)
	for i := range many {
		many[i].Addr = uint64(uintptr(unsafe.Pointer(&buf[i%64])))
	}
	require.NoError(t, c.AdviseMR(pd, 1, 1, many), "several requests")

	for _, req := range []hostif.ReregMRRequest{
		{Handle: odp.Handle},                           // no flag
		{Handle: odp.Handle, Flags: 8},                 // unknown flag
		{Handle: odp.Handle, Flags: 2, PD: pd + 100},   // no such PD
		{Handle: odp.Handle, Flags: 4, Access: 1 << 9}, // unknown access
		{Handle: odp.Handle, Flags: 4, Access: uint32(ibv.AccessRemoteWrite)},
	} {
		_, _, err := c.ReregMR(req)
		require.ErrorIs(t, err, unix.EINVAL, "%+v", req)
	}
	_, _, err = c.ReregMR(hostif.ReregMRRequest{Handle: 999, Flags: 4})
	require.ErrorIs(t, err, unix.ENOENT)
	_, _, err = c.ReregMR(hostif.ReregMRRequest{Handle: odp.Handle, Flags: 4, Access: uint32(ibv.AccessLocalWrite)})
	require.ErrorIs(t, err, unix.EFAULT, "out of ODP, the unmapped range is checked as reg_mr checks it")
	lkey, rkey, err := c.ReregMR(hostif.ReregMRRequest{Handle: odp.Handle, Flags: 1,
		Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Length: 64})
	require.NoError(t, err)
	require.Equal(t, [2]uint32{odp.LKey, odp.RKey}, [2]uint32{lkey, rkey})
	_, _, err = c.ReregMR(hostif.ReregMRRequest{Handle: odp.Handle, Flags: 4, Access: uint32(ibv.AccessLocalWrite)})
	require.NoError(t, err, "mapped now")
	require.NoError(t, c.DeregMR(odp.Handle))
	require.NoError(t, c.DeregMR(implicit.Handle))
}
