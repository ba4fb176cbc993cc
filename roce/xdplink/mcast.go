package xdplink

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/roce"
)

var _ roce.MulticastLink = (*Link)(nil)

// groupSockets are the UDP sockets through which a link joins multicast
// groups on its interface: a membership makes the kernel send the IGMP or
// MLD reports a snooping switch needs and program the NIC's MAC filter.
// They are made by Open, in the interface's network namespace (a socket
// stays in the namespace it was made in, whatever thread joins later);
// joining needs no privilege, so it works after the daemon dropped its
// own. The frames themselves never reach the sockets: the XDP program
// steers them to softnic first.
type groupSockets struct {
	ifindex int
	v4, v6  int // -1: none (IPv6 disabled)
	joined  map[netip.Addr]int
}

func (g *groupSockets) open(ifindex int) {
	g.ifindex, g.joined = ifindex, map[netip.Addr]int{}
	g.v4, g.v6 = -1, -1
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		g.v4 = fd
	}
	if fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		g.v6 = fd
	}
}

// ifreqHW is struct ifreq with a hardware address (ifr_hwaddr).
type ifreqHW struct {
	name   [unix.IFNAMSIZ]byte
	family uint16
	data   [14]byte
	_      [8]byte // the union's rest
}

// macMembership adds the group MAC address mac to the interface's
// multicast list, or removes it (SIOCADDMULTI, SIOCDELMULTI): the NIC's
// MAC filter lets the address in while it is listed.
func (g *groupSockets) macMembership(ifname string, mac [6]byte, add bool) error {
	if g.v4 < 0 {
		return fmt.Errorf("no socket: %w", unix.EAFNOSUPPORT)
	}
	var r ifreqHW
	copy(r.name[:unix.IFNAMSIZ-1], ifname)
	r.family = unix.AF_UNSPEC
	copy(r.data[:], mac[:])
	req := uintptr(unix.SIOCADDMULTI)
	if !add {
		req = unix.SIOCDELMULTI
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(g.v4), req, uintptr(unsafe.Pointer(&r))); e != 0 {
		return fmt.Errorf("%x on %s: %w", mac, ifname, e)
	}
	return nil
}

func (g *groupSockets) close() {
	if g.joined == nil {
		return // never opened: a Link Open did not make
	}
	for _, fd := range []int{g.v4, g.v6} {
		if fd >= 0 {
			unix.Close(fd) // the memberships go with the socket
		}
	}
	g.v4, g.v6 = -1, -1
}

// membership joins (join) or leaves group a on the interface.
func (g *groupSockets) membership(a netip.Addr, join bool) error {
	if a.Is4() {
		if g.v4 < 0 {
			return fmt.Errorf("no IPv4 socket: %w", unix.EAFNOSUPPORT)
		}
		m := &unix.IPMreqn{Multiaddr: a.As4(), Ifindex: int32(g.ifindex)}
		opt := unix.IP_ADD_MEMBERSHIP
		if !join {
			opt = unix.IP_DROP_MEMBERSHIP
		}
		return unix.SetsockoptIPMreqn(g.v4, unix.IPPROTO_IP, opt, m)
	}
	if g.v6 < 0 {
		return fmt.Errorf("no IPv6 socket: %w", unix.EAFNOSUPPORT)
	}
	m := &unix.IPv6Mreq{Multiaddr: a.As16(), Interface: uint32(g.ifindex)}
	opt := unix.IPV6_JOIN_GROUP
	if !join {
		opt = unix.IPV6_LEAVE_GROUP
	}
	return unix.SetsockoptIPv6Mreq(g.v6, unix.IPPROTO_IPV6, opt, m)
}

// JoinGroup implements roce.MulticastLink: the XDP program steers the
// group's RoCEv2 frames to the link, and the interface joins the group.
// Joins are counted: the group is left at the last LeaveGroup.
func (l *Link) JoinGroup(a netip.Addr) error {
	a = a.Unmap()
	if !a.IsMulticast() {
		return fmt.Errorf("join %v: not a multicast address: %w", a, unix.EINVAL)
	}
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	g := &l.groups
	if g.joined[a] > 0 {
		g.joined[a]++
		return nil
	}
	if err := l.prog.AddAddr(a); err != nil {
		return fmt.Errorf("join %v on %s: %w", a, l.ifname, err)
	}
	if err := g.membership(a, true); err != nil {
		l.prog.RemoveAddr(a)
		return fmt.Errorf("join %v on %s: %w", a, l.ifname, err)
	}
	g.joined[a] = 1
	return nil
}

// LeaveGroup implements roce.MulticastLink.
func (l *Link) LeaveGroup(a netip.Addr) error {
	a = a.Unmap()
	l.groupMu.Lock()
	defer l.groupMu.Unlock()
	g := &l.groups
	switch g.joined[a] {
	case 0:
		return fmt.Errorf("leave %v on %s: not joined: %w", a, l.ifname, unix.EINVAL)
	case 1:
		delete(g.joined, a)
	default:
		g.joined[a]--
		return nil
	}
	err1 := g.membership(a, false)
	err2 := l.prog.RemoveAddr(a)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("leave %v on %s: %w, %w", a, l.ifname, err1, err2)
	}
	return nil
}
