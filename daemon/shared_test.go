package daemon_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/verbs"
)

// memfdMappings counts this process's mappings of AllocMemory's memfds:
// the client's and, as the daemon runs in the test's process, the daemon's.
func memfdMappings(t *testing.T) int {
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return bytes.Count(maps, []byte("/memfd:softnic-mr"))
}

// Regions in memory from AllocMemory are reached through the daemon's own
// mapping of it, not with process_vm calls: after the client unmaps its
// view, a peer still reads what the client wrote there and writes and
// adds to it, which process_vm calls on the unmapped range could not. The
// session's end unmaps the daemon's mapping.
func TestSharedMemoryThroughDaemon(t *testing.T) {
	r := newRig(t)
	gidA, _ := r.a.GID(0)
	gidB, _ := r.b.GID(0)
	before := memfdMappings(t)
	dev, err := client.DialDevice(r.socket)
	require.NoError(t, err)
	mem, err := dev.AllocMemory(1 << 16)
	require.NoError(t, err)
	require.Equal(t, before+2, memfdMappings(t), "mapped by the client and by the daemon")
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	want := bytes.Clone(mem)
	pd := dev.AllocPD()
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	require.NoError(t, err)
	cq, err := dev.CreateCQ(32, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, r.peer.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	toRTS(t, qp.Modify, r.peer.QPN(), gidB)
	toRTS(t, r.peer.Modify, qp.QPN(), gidA)
	require.NoError(t, qp.Modify(&verbs.QPAttr{AccessFlags: allAccess | verbs.AccessRemoteAtomic}, verbs.QPAttrAccessFlags))

	// The client's WRITE leaves from the shared memory.
	require.NoError(t, qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{mr.SGE(0, 20000)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, cq).Status)
	r.waitWrites(t, 1)
	require.Equal(t, want[:20000], r.pbuf[:20000])

	require.NoError(t, unix.Munmap(mem)) // the client's view only

	// The peer READs 30000 bytes from it, WRITEs and adds to it, and READs
	// back what changed.
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(0, 30000)}, RemoteAddr: mr.Addr() + 1000, RKey: mr.RKey()}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	require.Equal(t, want[1000:31000], r.pbuf[:30000])
	copy(r.pbuf[40000:], "written by the peer")
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(40000, 19)}, RemoteAddr: mr.Addr() + 50000, RKey: mr.RKey()}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(41000, 8)}, RemoteAddr: mr.Addr() + 60000, RKey: mr.RKey(), CompareAdd: 5}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	word := binary.LittleEndian.Uint64(want[60000:])
	require.Equal(t, word, binary.LittleEndian.Uint64(r.pbuf[41000:]), "the atomic returns the original")
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(42000, 19)}, RemoteAddr: mr.Addr() + 50000, RKey: mr.RKey()}))
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 6, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(43000, 8)}, RemoteAddr: mr.Addr() + 60000, RKey: mr.RKey()}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	require.Equal(t, "written by the peer", string(r.pbuf[42000:42019]))
	require.Equal(t, word+5, binary.LittleEndian.Uint64(r.pbuf[43000:]))

	require.NoError(t, dev.Close())
	require.Eventually(t, func() bool { return r.srv.Sessions() == 0 }, 5e9, 1e6)
	require.Equal(t, before, memfdMappings(t), "the daemon unmapped it at the session's end")
}

// A block from AllocMemory is freed only after its regions are
// deregistered, and only blocks from AllocMemory are.
func TestFreeMemory(t *testing.T) {
	r := newRig(t)
	before := memfdMappings(t)
	dev, err := client.DialDevice(r.socket)
	require.NoError(t, err)
	defer dev.Close()
	mem, err := dev.AllocMemory(8192)
	require.NoError(t, err)
	mr, err := dev.AllocPD().RegMR(mem[4096:], verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.ErrorIs(t, dev.FreeMemory(mem), verbs.ErrInvalidArgument, "a region is registered in it")
	require.ErrorIs(t, dev.FreeMemory(make([]byte, 10)), verbs.ErrInvalidArgument)
	require.NoError(t, mr.Dereg())
	require.NoError(t, dev.FreeMemory(mem))
	require.Equal(t, before, memfdMappings(t))
	_, err = dev.AllocMemory(0)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
}

// The daemon maps only tmpfs memfds sealed against shrinking, whole pages
// the client says it mapped, each range once.
func TestShareMemoryRefused(t *testing.T) {
	r := newRig(t)
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	memfd := func(n int, seals int) (int, []byte) {
		fd, err := unix.MemfdCreate("softnic-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		require.NoError(t, unix.Ftruncate(fd, int64(n)))
		if seals != 0 {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
			require.NoError(t, err)
		}
		mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Munmap(mem) })
		return fd, mem
	}
	errno := func(err error) unix.Errno {
		var ce *hostsession.Error
		require.ErrorAs(t, err, &ce)
		return ce.Errno
	}

	unsealed, mem := memfd(8192, 0)
	_, err = c.ShareMemory(mem, unsealed)
	require.Equal(t, unix.EINVAL, errno(err), "not sealed against shrinking")
	_, err = c.ShareMemory(mem, -1)
	require.Equal(t, unix.EBADF, errno(err), "no descriptor")
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	_, err = c.ShareMemory(mem, p[0])
	require.Equal(t, unix.EINVAL, errno(err), "a pipe")

	fd, mem := memfd(8192, unix.F_SEAL_SHRINK)
	_, err = c.ShareMemory(unsafe.Slice(&mem[0], 16384), fd)
	require.Equal(t, unix.EINVAL, errno(err), "longer than the memfd")
	_, err = c.ShareMemory(mem[100:], fd)
	require.Equal(t, unix.EINVAL, errno(err), "not page aligned")
	h, err := c.ShareMemory(mem, fd)
	require.NoError(t, err)
	_, err = c.ShareMemory(mem[4096:], fd)
	require.Equal(t, unix.EINVAL, errno(err), "overlaps the first")

	pd, err := c.AllocPD()
	require.NoError(t, err)
	mr, err := c.RegMR(pd, mem[:100], allAccess)
	require.NoError(t, err)
	require.Equal(t, unix.EBUSY, errno(c.UnshareMemory(h)))
	require.NoError(t, c.DeregMR(mr.Handle))
	require.NoError(t, c.UnshareMemory(h))
	require.Equal(t, unix.ENOENT, errno(c.UnshareMemory(h)))
}
