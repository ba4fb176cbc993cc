package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/internal/perftest"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/xdplink"
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
// come from the kernel; a route through another interface than dev's is
// an error. Over a device the daemon serves, the CM runs its IDs in the
// daemon (rdmacm's remote mode), whose device finds its neighbours.
func newCM(dev perftest.Device) (*rdmacm.CM, error) {
	return rdmacm.New(rdmacm.Config{
		Devices: []*verbs.Device{dev.Verbs},
		Route: func(dst netip.Addr) (netip.Addr, error) {
			r, err := xdplink.RouteTo(dst)
			if err == nil && r.Ifname != dev.Name {
				err = fmt.Errorf("%v is reached through %s, not %s", dst, r.Ifname, dev.Name)
			}
			return r.Src, err
		},
		Neighbor: func(_ *verbs.Device, peer netip.Addr, _ time.Duration) error { return dev.Resolve(peer) },
	})
}
