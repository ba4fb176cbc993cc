package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/xdp"
)

// openDevice opens softnic on the interface named ifname, or the device
// of that name a daemon serves (softnic daemon -d IFACE:NAME): through the
// daemon that serves it, else in this process, the AF_XDP link with
// softnic's XDP program, and a verbs device whose GID table is the
// interface's addresses (xdplink.GIDTable order), run by engines engines
// (0: one per receive queue, up to the number of CPUs). Tests replace it
// to run over an in-memory link.
var openDevice = func(ifname string, engines int) (perftest.Device, func(), error) {
	d, err := openThroughDaemon(ifname)
	switch {
	case errors.Is(err, client.ErrNoDevice):
		if err := checkInterface(ifname); err != nil {
			return perftest.Device{}, nil, err
		}
		dev, closer, err := openInterface(ifname, engines, xdplink.Config{KeepIRQs: keepIRQs, Socket: xdp.Config{Mode: bindMode}})
		if err != nil {
			return dev, nil, explainOpen(ifname, err, false)
		}
		return dev, closer, nil
	case err != nil:
		return perftest.Device{}, nil, err
	case capture.file != "":
		d.Verbs.Close()
		return perftest.Device{}, nil, errCaptureThroughDaemon(d.Name)
	}
	return d, func() { d.Verbs.Close() }, nil
}

// openThroughDaemon opens the device a daemon of $SOFTNIC_RUN_DIR (by
// default /run/softnic) serves: the device named arg, or the one serving
// interface arg in this network namespace (resolveDevice), else
// softnic_ARG (a daemon that could not publish its tree). No root
// needed, and other programs may use the interface at the same time. The
// daemon resolves the peers' addresses itself. Without such a daemon the
// error is client.ErrNoDevice, and the tools open the interface
// themselves.
func openThroughDaemon(arg string) (perftest.Device, error) {
	name, ifname := defaultDeviceName(arg), arg
	sd, err := lookupDevice(client.RunDir(), arg, false)
	switch {
	case err == nil:
		name, ifname = sd.name, sd.iface
	case errors.Is(err, errNotServed):
		if iface, ok := treelessDevice(arg); ok {
			name, ifname = arg, iface
		}
	case checkInterface(arg) == nil:
		// A device of that name elsewhere, and an interface of that
		// name here that no daemon serves.
	default:
		return perftest.Device{}, err
	}
	if err := checkInterface(ifname); err != nil {
		return perftest.Device{}, err
	}
	nd, err := xdplink.LookupNetdev(ifname)
	if err != nil {
		return perftest.Device{}, err
	}
	dev, err := client.OpenDevice(name)
	if err != nil {
		return perftest.Device{}, err
	}
	noResolve := func(netip.Addr) error { return nil }
	return perftest.Device{Verbs: dev, Name: ifname, LinkMTU: nd.MTU, Resolve: noResolve}, nil
}

// treelessDevice reports whether arg is the default name of a device whose
// daemon published no tree (its socket only, softnic_IFACE.sock), and its
// interface: a device name works then too.
func treelessDevice(arg string) (iface string, ok bool) {
	iface, ok = strings.CutPrefix(arg, "softnic_")
	if !ok || !isInterface(iface) {
		return "", false
	}
	_, err := os.Lstat(client.DeviceSocket(arg))
	return iface, err == nil
}

// openInterface is openDevice with the link's configuration (its Addrs
// are the interface's).
func openInterface(ifname string, engines int, xcfg xdplink.Config) (perftest.Device, func(), error) {
	nd, err := xdplink.LookupNetdev(ifname)
	if err != nil {
		return perftest.Device{}, nil, err
	}
	xcfg.Addrs = nd.GIDs
	link, err := xdplink.Open(ifname, xcfg)
	if err != nil {
		return perftest.Device{}, nil, fmt.Errorf("open AF_XDP link on %s: %w", ifname, err)
	}
	// Peers the tools resolve before connecting (Resolve below) are known
	// already; the others, such as the peer a connection manager answers,
	// are looked up when first sent to.
	neighbor := func(peer netip.Addr) ([6]byte, error) { return xdplink.ResolveNeighbor(nd.Index, peer, 3*time.Second) }
	vcfg := verbs.Config{Addrs: nd.GIDs, Engines: engines, Resolve: neighbor, Priority: enginePriority, EngineCPUs: engineCPUs}
	if err := congestion.forInterface(ifname).apply(&vcfg); err != nil {
		link.Close()
		return perftest.Device{}, nil, err
	}
	dev, err := verbs.Open(link, vcfg)
	if err != nil {
		link.Close()
		return perftest.Device{}, nil, err
	}
	// The port follows the interface's carrier (ibv_query_port, port
	// events, link_downed), as an rxe device follows its netdev.
	unwatch := make(chan struct{})
	if err := xdplink.WatchOperState(nd.Index, unwatch, dev.SetLinkUp); err != nil {
		dev.Close()
		link.Close()
		return perftest.Device{}, nil, fmt.Errorf("watching %s's link state: %w", ifname, err)
	}
	stopCapture, err := capture.start(dev.RoCE(), capture.pathFor(ifname), os.Stderr)
	if err != nil {
		close(unwatch)
		dev.Close()
		link.Close()
		return perftest.Device{}, nil, err
	}
	resolve := func(peer netip.Addr) error {
		mac, err := xdplink.ResolveNeighbor(nd.Index, peer, 3*time.Second)
		if err != nil {
			return err
		}
		dev.RoCE().SetNeighbor(peer, mac)
		return nil
	}
	closer := func() { close(unwatch); stopCapture(); dev.Close(); link.Close() }
	return perftest.Device{Verbs: dev, Name: ifname, LinkMTU: nd.MTU, Resolve: resolve}, closer, nil
}

// keepIRQs is --softnic-keep-irqs (xdplink.Config.KeepIRQs).
var keepIRQs bool

const keepIRQsUsage = "softnic: leave the interface's interrupt vectors where they are (by default each engine's queue vectors move to one CPU, where the engine and the tool's polling loops then run, and move back at exit)"

// dialWait is how long a client retries while the server is not yet
// listening (perftest gives up at once; a short grace helps scripts).
var dialWait = 2 * time.Second
