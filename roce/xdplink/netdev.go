package xdplink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/roce"
)

// Errors of the interface helpers.
var (
	ErrNoAddresses        = errors.New("interface has no usable IP address")
	ErrNeighborUnresolved = errors.New("neighbour did not resolve (no ARP/ND reply)")
	ErrNoRoute            = errors.New("no route to the destination through the interface")
)

// Netdev is what a RoCE device needs to know about its Ethernet interface.
type Netdev struct {
	Name  string
	Index int
	MTU   int // L3 MTU
	MAC   [6]byte
	// GIDs are the interface's addresses in GID-table order (see GIDTable).
	GIDs []netip.Addr
	// Up reports whether the interface is operationally up (port state
	// ACTIVE rather than DOWN).
	Up bool
}

// ActiveMTU returns the port's active IB MTU in bytes (roce.ActiveIBMTU of
// the link MTU).
func (nd *Netdev) ActiveMTU() int { return roce.ActiveIBMTU(nd.MTU) }

// LookupNetdev reads the interface named ifname in the calling thread's
// network namespace.
func LookupNetdev(ifname string) (*Netdev, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	a := l.Attrs()
	nd := &Netdev{Name: a.Name, Index: a.Index, MTU: a.MTU, Up: operUp(a)}
	copy(nd.MAC[:], a.HardwareAddr)
	if nd.GIDs, err = gidTable(l); err != nil {
		return nil, err
	}
	return nd, nil
}

// GIDTable returns the GID table of the interface named ifname, ordered
// like the Linux GID cache does for a RoCE device (softnic lists only RoCE v2
// entries): GID 0 is the default GID, the IPv6 link-local address derived
// from the MAC (EUI-64), present whether or not the kernel has configured it
// yet, so GID indexes do not depend on IPv6 duplicate address detection;
// then the IPv4 addresses (as IPv4-mapped GIDs); then the other IPv6
// addresses. Tentative and DAD-failed addresses are left out.
func GIDTable(ifname string) ([]netip.Addr, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	return gidTable(l)
}

func gidTable(l netlink.Link) ([]netip.Addr, error) {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", l.Attrs().Name, err)
	}
	var v4, v6 []netip.Addr
	for _, a := range addrs {
		if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	var gids []netip.Addr
	if mac := l.Attrs().HardwareAddr; len(mac) == 6 {
		def := roce.DefaultGID([6]byte(mac))
		gids = append(gids, def)
		v6 = slices.DeleteFunc(v6, func(a netip.Addr) bool { return a == def })
	}
	gids = slices.Concat(gids, v4, v6)
	if len(v4)+len(v6) == 0 {
		// The default GID alone, for a caller that follows the addresses.
		return gids, fmt.Errorf("GID table of %q: %w", l.Attrs().Name, ErrNoAddresses)
	}
	return gids, nil
}

// usableNUD are neighbour states with a MAC address worth sending to.
const usableNUD = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
	netlink.NUD_PERMANENT | netlink.NUD_NOARP

// ResolveNeighbor returns the MAC address to send to dst through the
// interface with index ifindex: dst's own, or its gateway's when the route
// has one. It reads the kernel's neighbour table and, when the entry is
// missing or unresolved, asks the kernel to resolve it (ARP or neighbour
// discovery, through an NTF_USE request) and waits up to timeout.
func ResolveNeighbor(ifindex int, dst netip.Addr, timeout time.Duration) ([6]byte, error) {
	dst = dst.Unmap()
	nexthop := dst
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return [6]byte{}, fmt.Errorf("resolve %v: %w: %v", dst, ErrNoRoute, err)
	}
	r := routes[0]
	if r.LinkIndex != ifindex {
		return [6]byte{}, fmt.Errorf("resolve %v: %w (route uses ifindex %d, not %d)", dst, ErrNoRoute, r.LinkIndex, ifindex)
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil && !gw.IsUnspecified() {
		nexthop = gw.Unmap()
	}
	family := netlink.FAMILY_V4
	if nexthop.Is6() {
		family = netlink.FAMILY_V6
	}
	deadline := time.Now().Add(timeout)
	var lastAsk time.Time
	for {
		neighs, err := netlink.NeighList(ifindex, family)
		if err != nil {
			return [6]byte{}, fmt.Errorf("resolve %v: neighbour table: %w", dst, err)
		}
		for _, n := range neighs {
			ip, _ := netip.AddrFromSlice(n.IP)
			if ip.Unmap() == nexthop && n.State&usableNUD != 0 && len(n.HardwareAddr) == 6 {
				var mac [6]byte
				copy(mac[:], n.HardwareAddr)
				return mac, nil
			}
		}
		if time.Now().After(deadline) {
			return [6]byte{}, fmt.Errorf("resolve %v via %v: %w after %v", dst, nexthop, ErrNeighborUnresolved, timeout)
		}
		// Ask again every second, like a retransmitted ARP request.
		if time.Since(lastAsk) >= time.Second {
			lastAsk = time.Now()
			err := netlink.NeighSet(&netlink.Neigh{
				LinkIndex: ifindex, Family: family, IP: net.IP(nexthop.AsSlice()), Flags: netlink.NTF_USE,
			})
			if err != nil {
				return [6]byte{}, fmt.Errorf("resolve %v: ask the kernel: %w", dst, err)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
