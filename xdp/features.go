package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// What a driver says it offers for XDP (the "netdev" generic netlink
// family, include/uapi/linux/netdev.h): the kernel refuses XDP_ZEROCOPY
// unless the driver sets basic, redirect and xsk-zerocopy, and
// XDP_ZEROCOPY with XDP_USE_SG unless it takes more than one segment.

const (
	netdevCmdDevGet       = 1
	netdevAttrIfindex     = 1
	netdevAttrXDPFeatures = 3
	netdevAttrZCMaxSegs   = 4
)

// XDP feature bits (enum netdev_xdp_act).
const (
	xdpActBasic       = 1 << 0
	xdpActRedirect    = 1 << 1
	xdpActXSKZeroCopy = 1 << 3
	xdpActZC          = xdpActBasic | xdpActRedirect | xdpActXSKZeroCopy
)

var xdpActNames = []string{"basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"}

// DriverFeatures is what the interface's driver advertises for AF_XDP.
type DriverFeatures struct {
	XDP       uint64 // netdev_xdp_act bits
	ZCMaxSegs uint32 // segments a zero-copy frame may have (1: no multi-buffer)
}

// ZeroCopy reports whether the kernel lets sockets bind zero-copy.
func (f DriverFeatures) ZeroCopy() bool { return f.XDP&xdpActZC == xdpActZC }

// String lists the features as the kernel's netdev family names them.
func (f DriverFeatures) String() string {
	var names []string
	for i, n := range xdpActNames {
		if f.XDP&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		names = append(names, "none")
	}
	return fmt.Sprintf("xdp-features %s, xdp-zc-max-segs %d", strings.Join(names, ","), f.ZCMaxSegs)
}

// QueryDriverFeatures asks the kernel (5.19 and later: the netdev family)
// what the driver of the interface with index ifindex offers.
func QueryDriverFeatures(ifindex int) (DriverFeatures, error) {
	// A dump, filtered here: the kernels at hand answer dev-get of one
	// device with EINVAL.
	replies, err := netdevDump(netdevCmdDevGet)
	if err != nil {
		return DriverFeatures{}, fmt.Errorf("netdev dev-get: %w", err)
	}
	for _, attrs := range replies {
		if f, ok := deviceFeatures(attrs, ifindex); ok {
			return f, nil
		}
	}
	return DriverFeatures{}, fmt.Errorf("netdev dev-get: no interface with index %d", ifindex)
}

// netdevDump runs a dump of the netdev family's command cmd and returns
// each reply's attributes. Linux 6.18 answers about one dump in fifteen
// with EINVAL (measured on queue-get: 14 of 200), then the next one in
// full; such a dump is asked again.
func netdevDump(cmd uint8) ([][]syscall.NetlinkRouteAttr, error) {
	fam, err := netlink.GenlFamilyGet("netdev")
	if err != nil {
		return nil, fmt.Errorf("netdev netlink family: %w", err)
	}
	var msgs [][]byte
	for try := 0; try < 8; try++ {
		req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_DUMP)
		req.AddData(&nl.Genlmsg{Command: cmd, Version: 1})
		if msgs, err = dumpAll(req); !errors.Is(err, syscall.EINVAL) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	var replies [][]syscall.NetlinkRouteAttr
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return nil, err
		}
		replies = append(replies, attrs)
	}
	return replies, nil
}

// dumpAll sends a dump request and returns every reply's payload up to
// NLMSG_DONE. The netlink package's Execute stops at the first reply
// without NLM_F_MULTI, which the netdev family's replies lack.
func dumpAll(req *nl.NetlinkRequest) ([][]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	if err := unix.Sendto(fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var out [][]byte
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return nil, syscall.Errno(-errno)
					}
				}
				return out, nil
			}
			out = append(out, m.Data)
		}
	}
}

// deviceFeatures reads one device's reply, if it is the one of ifindex.
func deviceFeatures(attrs []syscall.NetlinkRouteAttr, ifindex int) (DriverFeatures, bool) {
	var f DriverFeatures
	found := false
	for _, a := range attrs {
		switch {
		case a.Attr.Type == netdevAttrIfindex && len(a.Value) == 4:
			found = binary.NativeEndian.Uint32(a.Value) == uint32(ifindex)
		case a.Attr.Type == netdevAttrXDPFeatures && len(a.Value) == 8:
			f.XDP = binary.NativeEndian.Uint64(a.Value)
		case a.Attr.Type == netdevAttrZCMaxSegs && len(a.Value) == 4:
			f.ZCMaxSegs = binary.NativeEndian.Uint32(a.Value)
		}
	}
	return f, found
}
