package xdplink

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Route is how the host reaches an address: through which interface, from
// which of its addresses.
type Route struct {
	Ifname string
	Src    netip.Addr
	// Local reports that the address is the host's own (Src is it).
	Local bool
}

// RouteTo finds, like rdma_resolve_addr, the interface an address belongs
// to or is routed through (in the calling thread's network namespace). An
// unspecified address takes the default route's interface. Loopback is no
// RoCE interface: a route through it is an error.
func RouteTo(dst netip.Addr) (Route, error) {
	dst = dst.Unmap()
	if dst.IsUnspecified() {
		// An address off every subnet takes the default route.
		if dst.Is4() {
			dst = netip.MustParseAddr("192.0.2.1") // TEST-NET-1
		} else {
			dst = netip.MustParseAddr("2001:db8::1")
		}
	}
	if r, ok, err := ownerOf(dst); ok || err != nil {
		return r, err
	}
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return Route{}, fmt.Errorf("route to %v: %w: %v", dst, ErrNoRoute, err)
	}
	l, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return Route{}, fmt.Errorf("route to %v: %w", dst, err)
	}
	src, _ := netip.AddrFromSlice(routes[0].Src)
	if l.Attrs().Flags&net.FlagLoopback != 0 {
		return Route{}, fmt.Errorf("route to %v goes through loopback: %w", dst, ErrNoRoute)
	}
	return Route{Ifname: l.Attrs().Name, Src: src.Unmap()}, nil
}

// ownerOf finds the interface that has address a.
func ownerOf(a netip.Addr) (Route, bool, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return Route{}, false, fmt.Errorf("list addresses: %w", err)
	}
	for _, ad := range addrs {
		got, ok := netip.AddrFromSlice(ad.IP)
		if !ok || got.Unmap() != a {
			continue
		}
		l, err := netlink.LinkByIndex(ad.LinkIndex)
		if err != nil {
			return Route{}, false, err
		}
		return Route{Ifname: l.Attrs().Name, Src: a, Local: true}, true, nil
	}
	return Route{}, false, nil
}
