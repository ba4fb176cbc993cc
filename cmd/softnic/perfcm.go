package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/tools/perftest"
)

// openPerfCM opens the device and connection manager of a -R run. perftest
// with -R checks the port of its -d device but lets rdma_cm pick the QPs'
// device by route; softnic's -d names the interface to run on, and its CM
// refuses peers routed through another one. Without -d, softnic runs on
// the interface that has or routes to addr (the server's address on a
// client, the unspecified address and so the default route's interface on
// a server), as rdma_cm would. Tests replace it to run over an in-memory
// link.
var openPerfCM = func(ifname string, engines int, addr netip.Addr) (perftest.Device, *rdmacm.CM, func(), error) {
	if ifname == "" {
		r, err := xdplink.RouteTo(addr)
		if err != nil {
			return perftest.Device{}, nil, nil, fmt.Errorf("no interface for %v (give -d): %w", addr, err)
		}
		ifname = r.Ifname
	}
	dev, closeDev, err := openDevice(ifname, engines)
	if err != nil {
		return perftest.Device{}, nil, nil, err
	}
	c, err := newCM(dev)
	if err != nil {
		closeDev()
		return perftest.Device{}, nil, nil, err
	}
	return dev, c, func() { c.Close(); closeDev() }, nil
}

// serverAddr resolves a client's host argument to the IPv4 address
// perftest connects to (getaddrinfo with AF_INET).
func serverAddr(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.Unmap().Is4() {
			return netip.Addr{}, fmt.Errorf("%s: perftest's rdma_cm mode connects over IPv4", host)
		}
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s: no IPv4 address", host)
	}
	return addrs[0].Unmap(), nil
}

// runCM runs the test in perftest's -R mode.
func (o *perfFlags) runCM(ctx context.Context, p perftest.Params, host string, stdout, stderr io.Writer) error {
	addr := netip.IPv4Unspecified()
	var peer perftest.CMPeer
	if host != "" {
		var err error
		if addr, err = serverAddr(ctx, host); err != nil {
			return err
		}
		peer = perftest.CMPeer{Server: netip.AddrPortFrom(addr, uint16(p.Port)), Wait: o.connectWait}
	}
	dev, cm, closeCM, err := openPerfCM(o.ifname, o.engines, addr)
	if err != nil {
		return err
	}
	defer closeCM()
	name := o.ifname
	if name == "" {
		name = dev.Name
	}
	printBind(stderr, name, dev.Verbs)
	p.Device = dev.Name
	if err := perftest.CheckGIDIndex(dev, p.Device, p.GIDIndex); p.GIDIndex >= 0 && err != nil {
		return err
	}
	err = perftest.RunRDMACM(ctx, cm, dev, peer, p, stdout)
	if o.stats {
		printSoftnicStats(stdout, dev.Verbs)
	}
	return err
}
