package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Device names. `softnic daemon -d IFACE` serves IFACE as device
// softnic_IFACE, `-d IFACE:NAME` as device NAME: real fabrics name their
// devices alike on every host (rxe0, mlx5_0), and programs that send a
// device's name to their peer (UCX's UCT tests) need that. A name is
// unique in its run directory (NAME.lock), and every command that takes
// a device (-d of exec, perf, pingpong, stat, stat res, devinfo) takes
// its name or the name of the interface it serves, resolved in the
// caller's network namespace (resolveDevice).

// maxDeviceName is the longest name: libibverbs keeps a device's names in
// 64 bytes with the NUL (IBV_SYSFS_NAME_MAX), and the longer of them is
// the device file's, NAME.HASH (cdevName: nine more).
const maxDeviceName = 63 - 9

// serveSpec is one device of softnic daemon: the interface and the
// device's name.
type serveSpec struct{ iface, name string }

// defaultDeviceName is the name of the device on iface without -d
// IFACE:NAME.
func defaultDeviceName(iface string) string { return "softnic_" + iface }

// checkDeviceName accepts a name libibverbs, sysfs and the run directory
// take alike: letters, digits, '_', '-' and '.', beginning with a letter
// or digit, at most maxDeviceName bytes.
func checkDeviceName(name string) error {
	switch {
	case name == "":
		return errors.New("empty device name")
	case len(name) > maxDeviceName:
		return fmt.Errorf("device name %q: longer than %d bytes (libibverbs keeps 63, and the device file adds 9)", name, maxDeviceName)
	case !isAlnum(name[0]):
		return fmt.Errorf("device name %q: must begin with a letter or a digit", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '-' && c != '.' {
			return fmt.Errorf("device name %q: %q is not a letter, digit, '_', '-' or '.'", name, c)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// parseServeSpecs reads softnic daemon's -d arguments, IFACE or
// IFACE:NAME (an interface name has no ':'), and refuses an interface or
// a name given twice.
func parseServeSpecs(args []string) ([]serveSpec, error) {
	var specs []serveSpec
	ifaces, names := map[string]bool{}, map[string]bool{}
	for _, a := range args {
		iface, name, named := strings.Cut(a, ":")
		if iface == "" {
			return nil, fmt.Errorf("-d %q: no interface before the ':'", a)
		}
		if !named {
			name = defaultDeviceName(iface)
		}
		if err := checkDeviceName(name); err != nil {
			return nil, fmt.Errorf("-d %s: %w", a, err)
		}
		if ifaces[iface] {
			return nil, fmt.Errorf("-d %s: interface %s given twice", a, iface)
		}
		if names[name] {
			return nil, fmt.Errorf("-d %s: device name %s given twice", a, name)
		}
		ifaces[iface], names[name] = true, true
		specs = append(specs, serveSpec{iface: iface, name: name})
	}
	return specs, nil
}

// servedDevice is a device of a run directory's tree.
type servedDevice struct {
	name, iface string
	// cdev is its class/infiniband_verbs entry (and device file).
	cdev string
	// here: its daemon serves an interface of this network namespace.
	here bool
}

// servedDevices lists the devices of runDir's tree (ibvtree.go), sorted
// by name: each one's interface (device/net), its class/infiniband_verbs
// entry, and whether the view of this network namespace has it. With no
// tree, the error is errNoTree.
func servedDevices(runDir string) ([]servedDevice, error) {
	cdevs, err := publishedDevices(runDir)
	if err != nil {
		return nil, err
	}
	ns, err := netnsInode()
	if err != nil {
		return nil, err
	}
	view := filepath.Join(runDir, viewDir(ns), "class", "infiniband")
	var devs []servedDevice
	for name, cdev := range cdevs {
		d := servedDevice{name: name, cdev: cdev}
		if ents, err := os.ReadDir(filepath.Join(runDir, sysfsDir, "class", "infiniband", name, "device", "net")); err == nil && len(ents) > 0 {
			d.iface = ents[0].Name()
		}
		if _, err := os.Lstat(filepath.Join(view, name)); err == nil {
			d.here = true
		}
		devs = append(devs, d)
	}
	slices.SortFunc(devs, func(a, b servedDevice) int { return strings.Compare(a.name, b.name) })
	return devs, nil
}

// errNotServed is resolveDevice's error when no device of the run
// directory has the name or serves an interface of that name here.
var errNotServed = errors.New("no such device")

// resolveDevice finds what -d arg names among devs: the device of that
// name, else the device serving the interface of that name in this
// network namespace. A device of another namespace is found by its name
// only with elsewhere (softnic stat: the run directory's devices are
// all its to show), else it is an error that says where it is, as a
// kernel device is not seen outside its namespace (rdma netns mode
// exclusive). The error is errNotServed, wrapped, when nothing matches.
func resolveDevice(devs []servedDevice, arg string, elsewhere bool) (servedDevice, error) {
	var other *servedDevice
	for i, d := range devs {
		if d.name != arg {
			continue
		}
		if d.here || elsewhere {
			return d, nil
		}
		other = &devs[i]
	}
	for _, d := range devs {
		if d.here && d.iface == arg {
			return d, nil
		}
	}
	if other != nil {
		return servedDevice{}, fmt.Errorf("device %s serves %s in another network namespace than this one: "+
			"programs there use it (ip netns exec NS ...)", other.name, other.iface)
	}
	return servedDevice{}, fmt.Errorf("%s: %w", arg, errNotServed)
}

// lookupDevice is resolveDevice over runDir's tree; a run directory with
// no tree matches nothing (errNotServed).
func lookupDevice(runDir, arg string, elsewhere bool) (servedDevice, error) {
	devs, err := servedDevices(runDir)
	if errors.Is(err, errNoTree) || errors.Is(err, fs.ErrNotExist) {
		return servedDevice{}, fmt.Errorf("%s: %w", arg, errNotServed)
	}
	if err != nil {
		return servedDevice{}, err
	}
	return resolveDevice(devs, arg, elsewhere)
}

// deviceList describes devs for an error message: "a (veth0), b (eth1,
// another network namespace)".
func deviceList(devs []servedDevice) string {
	var parts []string
	for _, d := range devs {
		where := d.iface
		if !d.here {
			where += ", another network namespace"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", d.name, where))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
