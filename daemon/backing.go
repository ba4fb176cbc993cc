package daemon

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/procmem"
)

// What may back registered memory. The daemon's engines read and write a
// client's memory themselves, and a page not in memory is faulted in on
// the engine's thread, which serves every client. A fault on anonymous
// memory, shmem or a local file system's page cache ends; one on a FUSE
// file waits for the user program that serves it, and one on a network
// file system for a server, for ever if they never answer. So a region
// may lie in anonymous memory or in files of local file systems the
// daemon can see, as the kernel refuses long-term pins of file mappings
// it cannot hold; anything else is EFAULT.

// localFS are the file systems whose faults end without another program.
var localFS = map[string]bool{"ext2": true, "ext3": true, "ext4": true, "xfs": true, "btrfs": true, "f2fs": true,
	"bcachefs": true, "zfs": true, "tmpfs": true, "ramfs": true, "hugetlbfs": true, "vfat": true, "exfat": true,
	"ntfs3": true, "iso9660": true, "squashfs": true, "erofs": true, "overlay": true}

// backings maps device numbers to the file system types of the daemon's
// mounts (its mountinfo), and knows the kernel's own shmem mount (memfd,
// SysV shm, shared anonymous memory), which no mount lists.
type backings struct {
	mu      sync.Mutex
	types   map[uint64]string
	checked time.Time
}

var fsTypes = &backings{}

// devKey is one number for major and minor.
func devKey(major, minor uint32) uint64 { return uint64(major)<<32 | uint64(minor) }

// registrable reports whether m may back a registered region.
func registrable(m procmem.Mapping) bool {
	if m.Anonymous() {
		return true
	}
	return localFS[fsTypes.of(devKey(m.Major, m.Minor))]
}

// of returns the file system type of device dev, reading the mounts again
// (at most once a second) when it is not known.
func (b *backings) of(dev uint64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.types[dev]; ok {
		return t
	}
	if b.types != nil && time.Since(b.checked) < time.Second {
		return ""
	}
	b.types, b.checked = mountTypes(), time.Now()
	return b.types[dev]
}

// mountTypes reads the daemon's mounts and adds the internal shmem and
// hugetlbfs mounts that memfds live on.
func mountTypes() map[uint64]string {
	types := map[uint64]string{}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		parseMountinfo(data, types)
	}
	for _, c := range []struct {
		flags int
		fs    string
	}{{0, "tmpfs"}, {unix.MFD_HUGETLB, "hugetlbfs"}} {
		if fd, err := unix.MemfdCreate("softnic-probe", unix.MFD_CLOEXEC|c.flags); err == nil {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil {
				types[devKey(unix.Major(st.Dev), unix.Minor(st.Dev))] = c.fs
			}
			unix.Close(fd)
		}
	}
	return types
}

// parseMountinfo adds each line's "major:minor" and file system type
// (after the " - " separator) to types.
func parseMountinfo(data []byte, types map[uint64]string) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 3 {
			continue
		}
		sep := bytes.Index(sc.Bytes(), []byte(" - "))
		if sep < 0 {
			continue
		}
		after := bytes.Fields(sc.Bytes()[sep+3:])
		maj, min, ok := bytes.Cut(f[2], []byte(":"))
		if !ok || len(after) == 0 {
			continue
		}
		major, err1 := strconv.ParseUint(string(maj), 10, 32)
		minor, err2 := strconv.ParseUint(string(min), 10, 32)
		if err1 == nil && err2 == nil {
			types[devKey(uint32(major), uint32(minor))] = string(after[0])
		}
	}
}
