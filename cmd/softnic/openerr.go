package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/roce/xdplink"
)

// The errors of opening an interface, said as what went wrong and what to
// do next. The tools and the daemon open interfaces alike, but a tool has
// one more way out (a daemon), so each gets its own wording.

// checkInterface fails with the way out when there is no network
// interface ifname in this network namespace (notServedError: a device
// name is told the device's interface, or how to start its daemon).
func checkInterface(ifname string) error {
	if isInterface(ifname) {
		return nil
	}
	devs, _ := servedDevices(client.RunDir()) // none: the error says how to start one
	return noInterfaceError{notServedError(client.RunDir(), ifname, devs, false)}
}

// checkDaemonInterface is checkInterface for softnic daemon, which takes
// an interface: a device name given instead is told its interface.
func checkDaemonInterface(ifname string) error {
	if isInterface(ifname) {
		return nil
	}
	if iface, ok := strings.CutPrefix(ifname, "softnic_"); ok && isInterface(iface) {
		return noInterfaceError{fmt.Errorf("no network interface %q: the daemon takes an interface, and %s is the name of the device it makes of %s; give -d %s (or -d %s:%s)",
			ifname, ifname, iface, iface, iface, ifname)}
	}
	return noInterfaceError{fmt.Errorf("no network interface %q in this network namespace (`ip link` lists them; "+
		"for one in another namespace, run softnic with `ip netns exec NS`)", ifname)}
}

// checkDaemonInterfaceName is checkDaemonInterface for an interface the
// daemon will wait for: only a device's name given for its interface
// (softnic_IFACE) is refused.
func checkDaemonInterfaceName(ifname string) error {
	if iface, ok := strings.CutPrefix(ifname, "softnic_"); ok && !isInterface(ifname) && isInterface(iface) {
		return checkDaemonInterface(ifname)
	}
	return nil
}

// noInterfaceError is checkInterface's error, complete as it is.
type noInterfaceError struct{ error }

// explainOpen rewords the error of opening ifname: for the daemon
// (asDaemon) or for a tool that found no daemon serving it.
func explainOpen(ifname string, err error, asDaemon bool) error {
	var noIface noInterfaceError
	switch {
	case errors.As(err, &noIface):
		return err
	case errors.Is(err, bpf.ErrPermission) && asDaemon:
		return fmt.Errorf("%s: softnic daemon needs root to attach its XDP program and AF_XDP sockets "+
			"(CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW): run it with sudo (%v)", ifname, err)
	case errors.Is(err, bpf.ErrPermission):
		return fmt.Errorf("%s: no softnic daemon serves it (no socket %s), and opening it in this process "+
			"needs root (XDP program, AF_XDP sockets): run this as root, or start a daemon (sudo softnic daemon -d %s) "+
			"and run the tool as any user (%v)", ifname, filepath.Join(client.RunDir(), "softnic_"+ifname+".sock"), ifname, err)
	case errors.Is(err, bpf.ErrXDPBusy) && asDaemon:
		return fmt.Errorf("%s: %w; stop the program that attached it first (if it is a softnic tool, let it end)", ifname, err)
	case errors.Is(err, bpf.ErrXDPBusy):
		return fmt.Errorf("%s: %w; if it is another softnic tool's, wait for it to end, or run both through a daemon "+
			"(sudo softnic daemon -d %s; the tools then share the interface); a daemon of another run directory "+
			"is found with SOFTNIC_RUN_DIR", ifname, err, ifname)
	case errors.Is(err, xdplink.ErrLinkDown):
		return fmt.Errorf("%s: %w: bring it up (ip link set dev %s up)", ifname, err, ifname)
	}
	return fmt.Errorf("%s: %w", ifname, err)
}
