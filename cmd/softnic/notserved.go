package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/softnic/softnic/daemon/client"
)

// What to say when -d names no device a daemon serves here: in the
// user's words (device, interface), with what to give instead or how to
// start the daemon. A daemon takes an interface (softnic daemon -d IFACE),
// never a device name, so that is all it is ever advised with.

// startDaemon is the command that starts a daemon serving iface for the
// tools of runDir.
func startDaemon(runDir, iface string) string {
	cmd := "sudo softnic daemon -d " + iface
	if runDir != client.DefaultRunDir {
		cmd += " --run-dir " + runDir
	}
	return cmd
}

// isInterface reports whether this network namespace has interface name.
func isInterface(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// notServedError explains that arg, given as -d, is neither a device of
// runDir's devs served here nor an interface one serves. needDaemon: the
// command works only through a daemon (exec, env, stat), so an interface
// no daemon serves is an error too; the others run on an interface
// themselves.
func notServedError(runDir, arg string, devs []servedDevice, needDaemon bool) error {
	if iface, ok := strings.CutPrefix(arg, "softnic_"); ok && isInterface(iface) {
		for _, d := range devs {
			if d.here && d.iface == iface {
				return fmt.Errorf("no device %s: interface %s is served as device %s; give -d %s or -d %s", arg, iface, d.name, d.name, iface)
			}
		}
		return fmt.Errorf("no daemon serves interface %s (whose device would be %s); start one: %s", iface, arg, startDaemon(runDir, iface))
	}
	if isInterface(arg) {
		if needDaemon {
			return fmt.Errorf("no daemon serves interface %s; start one: %s", arg, startDaemon(runDir, arg))
		}
		return nil
	}
	return fmt.Errorf("no device or interface %q here; %s", arg, servedHere(runDir, devs))
}

// servedHere says which devices a user may name: those served in this
// network namespace, else how to start a daemon.
func servedHere(runDir string, devs []servedDevice) string {
	var here []servedDevice
	for _, d := range devs {
		if d.here {
			here = append(here, d)
		}
	}
	if len(here) == 0 {
		elsewhere := ""
		if len(devs) > 0 {
			elsewhere = "; its devices serve other network namespaces: " + deviceList(devs)
		}
		return fmt.Sprintf("no daemon serves this network namespace (run directory %s%s); start one: %s (`ip link` lists the interfaces)",
			runDir, elsewhere, startDaemon(runDir, "IFACE"))
	}
	var parts []string
	for _, d := range here {
		parts = append(parts, fmt.Sprintf("%s (interface %s)", d.name, d.iface))
	}
	return "devices served here: " + strings.Join(parts, ", ")
}
