package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// softnic daemon serves every local user as root, so once its devices are
// served (XDP attached, AF_XDP sockets open, control sockets and the
// metrics listener bound, the libibverbs tree written) it keeps only the
// capabilities its running datapath uses (daemonKeeps) and gives up the
// rest for good: from the effective, permitted and inheritable sets, the
// ambient set and the bounding set, with no_new_privs set and the
// securebits that keep an exec as root from getting capabilities back.
// It stays uid 0: its files (run directory, /dev/infiniband, /proc/irq)
// are root's and it reaches them as their owner, with no capability to
// bypass permissions.
//
// Capabilities belong to threads in Linux, and a Go program has many, so
// every change is made on all of them at once (syscall.AllThreadsSyscall);
// the runtime refuses that in a cgo binary, so the daemon is built with
// CGO_ENABLED=0 (make build does) and a cgo build does not start.

// capability is a capability the daemon keeps, with why.
type capability struct {
	n    int
	name string
	why  string
}

// daemonKeeps returns what the running daemon needs:
//
//   - CAP_NET_ADMIN: the first packet to a peer not yet in the neighbour
//     table asks the kernel to resolve it (RTM_NEWNEIGH with NTF_USE,
//     xdplink.ResolveNeighbor), which rtnetlink allows only with it. A
//     connection manager answers peers the daemon has never seen.
//   - CAP_BPF, only on kernels where every bpf() command needs it
//     (before 6.5, with unprivileged BPF disabled): reading the XDP
//     program's counters (softnic stat, metrics) and clearing its socket
//     map at exit. Later kernels check only the map descriptor's mode.
//
// Nothing else: clients' memory is reached through the /proc/self/mem and
// /proc/self/maps descriptors each client's hello passes (CAP_SYS_PTRACE),
// the XDP program is detached by closing its bpf_link, AF_XDP sockets are
// neither opened nor rebound after start (CAP_NET_RAW), their UMEMs are
// pinned at start (CAP_IPC_LOCK), the writer threads only raise their nice
// value and the engines set their own CPU affinity, and raise their
// threads within RLIMIT_RTPRIO and RLIMIT_NICE, which the daemon set while
// root (allowSchedLimits; CAP_SYS_NICE), and
// /proc/irq/N/smp_affinity_list, the run directory and /dev/infiniband
// are root's files, written as their owner.
func daemonKeeps() []capability {
	keep := []capability{{unix.CAP_NET_ADMIN, "cap_net_admin", "neighbour resolution (RTM_NEWNEIGH NTF_USE)"}}
	if bpfCommandsNeedCapability() {
		keep = append(keep, capability{unix.CAP_BPF, "cap_bpf", "bpf() map commands on this kernel"})
	}
	return keep
}

// errCgo is why a cgo build of the daemon does not start.
var errCgo = errors.New("this softnic binary was built with cgo, and the Go runtime cannot change the " +
	"capabilities of every thread of a cgo program (syscall.AllThreadsSyscall), so the daemon could not drop " +
	"its privileges: build it with CGO_ENABLED=0 (make build does)")

// allThreads makes a system call on every thread of the process.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	switch {
	case errno == syscall.ENOTSUP:
		return errCgo
	case errno != 0:
		return errno
	}
	return nil
}

// checkAllThreadsSyscall fails in a binary that cannot change every
// thread's privileges (a cgo build).
func checkAllThreadsSyscall() error {
	return allThreads(unix.SYS_GETPID, 0, 0, 0)
}

// raiseNoFile raises the descriptor limit, soft and hard, to the kernel's
// bound (fs.nr_open) where the process may (CAP_SYS_RESOURCE), else the
// soft limit to the hard one; every session holds descriptors. It returns
// the soft limit then.
func raiseNoFile() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > lim.Max {
			up := syscall.Rlimit{Cur: n, Max: n}
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
				return n
			}
		}
	}
	if lim.Cur < lim.Max {
		up := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			return lim.Max
		}
	}
	return lim.Cur
}

// capSets reads the calling thread's capability sets, as 64-bit masks.
func capSets() (effective, permitted, inheritable uint64, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, 0, 0, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	return join(data[0].Effective, data[1].Effective), join(data[0].Permitted, data[1].Permitted),
		join(data[0].Inheritable, data[1].Inheritable), nil
}

// setCapsAllThreads sets every thread's effective and permitted sets to
// caps and its inheritable set to none.
func setCapsAllThreads(caps uint64) error {
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{
		{Effective: uint32(caps), Permitted: uint32(caps)},
		{Effective: uint32(caps >> 32), Permitted: uint32(caps >> 32)},
	}
	var pin runtime.Pinner
	pin.Pin(hdr)
	pin.Pin(data)
	defer pin.Unpin()
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// lastCap is the kernel's highest capability number.
func lastCap() int {
	c := 0
	for c < 63 {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c+1), 0, 0, 0); err != nil {
			break
		}
		c++
	}
	return c
}

// Securebits (linux/securebits.h): an exec as uid 0 gets no capabilities,
// none can be raised into the ambient set, and keep-caps stays off; each
// locked.
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
	daemonSecurebits              = secbitNoRoot | secbitNoRootLocked | secbitKeepCapsLocked |
		secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
)

// dropPrivileges gives up, on every thread, every capability but those
// daemonKeeps names, sets no_new_privs, and logs one line saying what it
// kept (nofile: the descriptor limit raiseNoFile set).
func dropPrivileges(log *slog.Logger, nofile uint64) error {
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("drop privileges: no_new_privs: %w", err)
	}
	_, permitted, _, err := capSets()
	if err != nil {
		return fmt.Errorf("drop privileges: %w", err)
	}
	if permitted == 0 {
		log.Info("privileges: none to drop (not root, no capabilities)", "uid", os.Geteuid(),
			"no_new_privs", 1, "open_files", nofile)
		return nil
	}
	var keep uint64
	var kept []string
	for _, c := range daemonKeeps() {
		if permitted&(1<<c.n) != 0 {
			keep |= 1 << c.n
			kept = append(kept, c.name)
		}
	}
	bounding := "reduced"
	if permitted&(1<<unix.CAP_SETPCAP) != 0 {
		// The bounding set and securebits need CAP_SETPCAP in effect.
		if err := setCapsAllThreads(permitted); err != nil {
			return fmt.Errorf("drop privileges: %w", err)
		}
		if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, daemonSecurebits, 0); err != nil {
			return fmt.Errorf("drop privileges: securebits: %w", err)
		}
		for c, last := 0, lastCap(); c <= last; c++ {
			if keep&(1<<c) != 0 {
				continue
			}
			if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
				return fmt.Errorf("drop privileges: bounding set, capability %d: %w", c, err)
			}
		}
	} else {
		bounding = "unchanged (no CAP_SETPCAP)"
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("drop privileges: ambient set: %w", err)
	}
	if err := setCapsAllThreads(keep); err != nil {
		return fmt.Errorf("drop privileges: %w", err)
	}
	eff, perm, inh, err := capSets()
	if err != nil || eff != keep || perm != keep || inh != 0 {
		return fmt.Errorf("drop privileges: capabilities after capset %#x/%#x/%#x, want %#x (%v)", eff, perm, inh, keep, err)
	}
	log.Info("privileges dropped", "kept", strings.Join(kept, ","), "uid", os.Geteuid(),
		"bounding_set", bounding, "no_new_privs", 1, "open_files", nofile)
	return nil
}

// bpfCommandsNeedCapability reports whether this kernel refuses every
// bpf() command to a process without CAP_BPF (and CAP_SYS_ADMIN), as
// kernels before 6.5 do with kernel.unprivileged_bpf_disabled set. It asks
// on a thread of its own, which drops both from its effective set and ends
// with the question: a lookup in map descriptor -1 fails with EPERM where
// the capability is checked first, with EBADF where only the descriptor is.
func bpfCommandsNeedCapability() bool {
	answer := make(chan bool, 1)
	go func() {
		// Never unlocked: the thread and its reduced set end with this
		// goroutine.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			answer <- true
			return
		}
		if data[1].Permitted&(1<<(unix.CAP_BPF-32)) == 0 {
			answer <- false // nothing to keep
			return
		}
		data[1].Effective &^= 1 << (unix.CAP_BPF - 32)
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			answer <- true
			return
		}
		// union bpf_attr for BPF_MAP_LOOKUP_ELEM: u32 map_fd, pad, u64 key,
		// value, flags.
		var attr [32]byte
		*(*uint32)(unsafe.Pointer(&attr[0])) = ^uint32(0)
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
		answer <- errno == unix.EPERM
	}()
	return <-answer
}
