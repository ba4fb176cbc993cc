package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/procmem"
)

const sampleMountinfo = `22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683568k
61 27 0:52 / /mnt/f rw,nosuid,nodev,relatime shared:34 - fuse.sshfs host:/ rw,user_id=1000
62 27 0:53 / /mnt/n rw,relatime master:1 - nfs4 srv:/export rw
bad line
`

func TestParseMountinfo(t *testing.T) {
	types := map[uint64]string{}
	parseMountinfo([]byte(sampleMountinfo), types)
	require.Equal(t, map[uint64]string{devKey(0, 21): "proc", devKey(254, 0): "ext4", devKey(0, 27): "tmpfs",
		devKey(0, 52): "fuse.sshfs", devKey(0, 53): "nfs4"}, types)
}

// Anonymous memory and files of local file systems may back a region;
// FUSE and network file systems, whose faults wait on another program,
// and devices no mount of the daemon's names, may not.
func TestRegistrable(t *testing.T) {
	b := &backings{types: map[uint64]string{}}
	parseMountinfo([]byte(sampleMountinfo), b.types)
	old := fsTypes
	fsTypes = b
	defer func() { fsTypes = old }()
	b.checked = b.checked.Add(1) // as read just now: no refresh within the test
	m := func(major, minor uint32, inode uint64) procmem.Mapping {
		return procmem.Mapping{Readable: true, Major: major, Minor: minor, Inode: inode}
	}
	require.True(t, registrable(m(0, 0, 0)), "anonymous")
	require.True(t, registrable(m(254, 0, 7)), "ext4")
	require.True(t, registrable(m(0, 27, 7)), "tmpfs")
	require.False(t, registrable(m(0, 52, 7)), "FUSE")
	require.False(t, registrable(m(0, 53, 7)), "NFS")
	require.False(t, registrable(m(0, 21, 7)), "procfs")
}

// The daemon's own mounts and memfds are found: a file of this machine's
// temporary directory and a memfd mapped here may back a region.
func TestRegistrableHere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, make([]byte, 4096), 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	file, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(file)
	fd, err := unix.MemfdCreate("softnic-test", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Ftruncate(fd, 4096))
	shm, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(shm)
	p, err := procmem.Open(os.Getpid())
	require.NoError(t, err)
	defer p.Close()
	for name, b := range map[string][]byte{"file": file, "memfd": shm} {
		addr := uint64(uintptr(unsafe.Pointer(&b[0])))
		require.NoError(t, p.CheckMappedBy(addr, 4096, false, registrable), name)
	}
}

func TestIdentityMap(t *testing.T) {
	require.True(t, identityMap([]byte("         0          0 4294967295\n")))
	require.False(t, identityMap([]byte("         0       1000          1\n")), "a user's own namespace")
	require.False(t, identityMap([]byte("0 0 4294967295\n1 1 1\n")))
	require.False(t, identityMap(nil))
}
