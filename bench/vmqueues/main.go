// vmqueues puts all of a network interface's combined channels (queue
// pairs) in use, as `ethtool -L IFACE combined MAX` would: bench-vm's
// guests have no ethtool.
//
// Why bench-vm uses it: a virtio-net guest uses one queue pair per vCPU
// and native XDP switches the others on for XDP_TX while a program is
// attached, so each softnic run would open sockets on queues that come
// and go with its program. With every pair in use from the start, every
// run, of either bind mode, starts from the same queues. (A run that
// detached its program before the kernel released its zero-copy pools
// once left virtio-net holding them, and the next run crashed the guest;
// xdplink.Link.Close now waits for the release, TestZeroCopyDaemonRestarts.)
package main

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

const (
	ethtoolGChannels = 0x3c // ETHTOOL_GCHANNELS
	ethtoolSChannels = 0x3d // ETHTOOL_SCHANNELS
)

// ifreqData is struct ifreq with its ifr_data member.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // the rest of the union
}

func ethtool(fd int, ifname string, ch *ethtoolChannels) error {
	var ifr ifreqData
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(ch)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}

func run(ifname string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: ethtoolGChannels}
	if err := ethtool(fd, ifname, &ch); err != nil {
		return fmt.Errorf("%s: get channels: %w", ifname, err)
	}
	if ch.combinedCount == ch.maxCombined {
		fmt.Printf("%s: %d of %d queue pairs in use\n", ifname, ch.combinedCount, ch.maxCombined)
		return nil
	}
	was := ch.combinedCount
	ch.cmd, ch.combinedCount = ethtoolSChannels, ch.maxCombined
	if err := ethtool(fd, ifname, &ch); err != nil {
		return fmt.Errorf("%s: set %d combined channels: %w", ifname, ch.maxCombined, err)
	}
	fmt.Printf("%s: %d of %d queue pairs in use (were %d)\n", ifname, ch.combinedCount, ch.maxCombined, was)
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: vmqueues IFACE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "vmqueues:", err)
		os.Exit(1)
	}
}
