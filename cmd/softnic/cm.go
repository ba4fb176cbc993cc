package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"
)

// openCM opens softnic, like rdma_resolve_addr and rdma_bind_addr find
// a device, on the interface that has addr or routes to it (an
// unspecified addr: the default route's), and returns a connection
// manager over it. Tests replace it to run over an in-memory link.
var openCM = func(addr netip.Addr) (*rdmacm.CM, func(), error) {
	r, err := xdplink.RouteTo(addr)
	if err != nil {
		return nil, nil, err
	}
	dev, closeDev, err := openDevice(r.Ifname, 0)
	if err != nil {
		return nil, nil, err
	}
	c, err := newCM(dev)
	if err != nil {
		closeDev()
		return nil, nil, err
	}
	return c, func() { c.Close(); closeDev() }, nil
}

// newCM returns a connection manager over dev whose routes and neighbours
// come from the kernel (kernelRouting). Over a device the daemon serves,
// the CM runs its IDs in the daemon (rdmacm's remote mode), whose own
// kernelRouting finds routes and neighbours.
func newCM(dev perftest.Device) (*rdmacm.CM, error) {
	route, neighbor := kernelRouting(dev.Name)
	return rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{dev.Verbs}, Route: route, Neighbor: neighbor})
}

// kernelRouting is what rdma_cm's address resolution asks of the kernel
// (addr.c's rdma_resolve_ip) for the device of interface ifname: the
// route's source address (no route: rdmacm.ErrNoRoute, which the kernel
// returns at once as ENETUNREACH; a route through another interface gives
// that interface's source, which no device has, and so the kernel's
// ADDR_ERROR with ENODEV), and the peer's link address on the interface
// within the caller's timeout (the kernel's ADDR_ERROR with ETIMEDOUT
// when none answers), which the device then sends to.
func kernelRouting(ifname string) (route func(netip.Addr) (netip.Addr, error),
	neighbor func(*verbs.Device, netip.Addr, time.Duration) error) {
	route = func(dst netip.Addr) (netip.Addr, error) {
		r, err := xdplink.RouteTo(dst)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%w: %w", rdmacm.ErrNoRoute, err)
		}
		return r.Src, nil
	}
	neighbor = func(dev *verbs.Device, peer netip.Addr, timeout time.Duration) error {
		nd, err := xdplink.LookupNetdev(ifname)
		if err != nil {
			return err
		}
		mac, err := xdplink.ResolveNeighbor(nd.Index, peer, timeout)
		if err != nil {
			return err
		}
		dev.RoCE().SetNeighbor(peer, mac)
		return nil
	}
	return route, neighbor
}
