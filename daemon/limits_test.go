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

// errnoOf is the errno of a refused command.
func errnoOf(t *testing.T, err error) unix.Errno {
	t.Helper()
	var ce *hostsession.Error
	require.ErrorAs(t, err, &ce)
	return ce.Errno
}

// Each bound refuses the one past it with the errno a kernel device
// gives, takes one again once one is given back, and a session's end
// gives back all it held.
func TestLimits(t *testing.T) {
	uid := uint32(os.Geteuid())
	// A connection holds 2 descriptors, a session 3 more: room for two
	// channels in the first session.
	r := newRigLimited(t, daemon.Limits{Sessions: 2, PDs: 2, MRs: 1, CQs: 2, QPs: 1, SRQs: 1, AHs: 1, CMIDs: 1,
		Descriptors: 2*5 + 2, RingBytes: 64 << 10, SharedBytes: 8192})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	_, err = hostsession.Dial(r.socket)
	require.Equal(t, unix.EAGAIN, errnoOf(t, err), "a third session")

	pd, err := c.AllocPD()
	require.NoError(t, err)
	_, err = other.AllocPD()
	require.NoError(t, err)
	_, err = c.AllocPD()
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "PDs over both sessions")

	buf := make([]byte, 8192)
	mr, err := c.RegMR(pd, buf, allAccess)
	require.NoError(t, err)
	_, err = c.RegMR(pd, buf, allAccess)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "MRs")
	require.NoError(t, c.DeregMR(mr.Handle))
	mr, err = c.RegMR(pd, buf, allAccess)
	require.NoError(t, err, "an MR given back is one to take again")

	ch, err := c.CreateCompChannel()
	require.NoError(t, err)
	ch2, err := c.CreateCompChannel()
	require.NoError(t, err)
	_, err = c.CreateCompChannel()
	require.Equal(t, unix.EMFILE, errnoOf(t, err), "descriptors")
	require.NoError(t, c.DestroyCompChannel(ch2.Handle))
	ch2.File.Close()
	ch2, err = c.CreateCompChannel()
	require.NoError(t, err, "a destroyed channel's descriptor is one to take again")

	cq, err := c.CreateCQ(16, ch, 1)
	require.NoError(t, err)
	require.Equal(t, unix.EBUSY, errnoOf(t, c.DestroyCompChannel(ch.Handle)), "a CQ uses the channel")
	big, err := c.CreateCQ(8192, nil, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "ring bytes: %v", big)
	cq2, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	_, err = c.CreateCQ(16, nil, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "CQs")

	qpReq := hostif.CreateQPRequest{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle, MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	_, err = c.CreateQP(qpReq)
	require.NoError(t, err)
	_, err = c.CreateQP(qpReq)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "QPs")
	_, err = c.CreateSRQ(pd, 4, 1, 0, 0)
	require.NoError(t, err)
	_, err = c.CreateSRQ(pd, 4, 1, 0, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "SRQs")
	gid, err := c.QueryGID(0)
	require.NoError(t, err)
	_, err = c.CreateAH(pd, &ibv.AddressVector{DGID: gid, HopLimit: 64})
	require.NoError(t, err)
	_, err = c.CreateAH(pd, &ibv.AddressVector{DGID: gid, HopLimit: 64})
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "AHs")

	mem, fd := sealedMemfd(t, 16384)
	_, err = c.ShareMemory(mem[:8192], fd)
	require.NoError(t, err)
	_, err = c.ShareMemory(mem[8192:], fd)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "shared bytes")

	// The CM's channel takes the last descriptor of the user's; its ID
	// the one ID.
	require.NoError(t, c.DestroyCompChannel(ch2.Handle))
	ch2.File.Close()
	cmc, err := c.CMCreateChannel()
	require.NoError(t, err)
	_, err = c.CMCreateID(cmc.Handle, 0x0106, 0)
	require.NoError(t, err)
	_, err = c.CMCreateID(cmc.Handle, 0x0106, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "rdma_cm IDs")
	require.Equal(t, unix.EBUSY, errnoOf(t, c.CMDestroyChannel(cmc.Handle)), "an ID sends its events there")
	_ = cq2

	c.Close()
	other.Close()
	require.Eventually(t, func() bool { return r.srv.Usage(uid) == daemon.Usage{} }, 10*time.Second, 10*time.Millisecond,
		"all given back: %+v", r.srv.Usage(uid))
	c, err = hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, daemon.Usage{Sessions: 1, Descriptors: 5, RingBytes: 4096}, r.srv.Usage(uid))
}

// sealedMemfd is n bytes of a memfd sealed against shrinking, mapped
// shared, as share_memory takes them.
func sealedMemfd(t *testing.T, n int) ([]byte, int) {
	t.Helper()
	fd, err := unix.MemfdCreate("softnic-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	require.NoError(t, unix.Ftruncate(fd, int64(n)))
	_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	require.NoError(t, err)
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem, fd
}

// TestDescriptorShare: the default descriptor bound leaves the daemon
// more than one user can take, whatever its descriptor limit.
func TestDescriptorShare(t *testing.T) {
	def := daemon.DefaultLimits.Descriptors
	for _, tc := range []struct {
		nofile  uint64
		servers int
		want    int
	}{
		{1 << 20, 1, def},
		{20000, 1, 9488},
		{20000, 2, 4744},
		{1024, 1, 64},
		{^uint64(0), 1, def},
	} {
		got := daemon.DescriptorShare(tc.nofile, tc.servers)
		require.Equal(t, tc.want, got, "nofile %d, %d servers", tc.nofile, tc.servers)
		if tc.nofile >= 4096 && tc.nofile < 1<<40 {
			require.Less(t, uint64(got*tc.servers), tc.nofile/2, "one user may take half of the daemon's descriptors")
		}
	}
}
