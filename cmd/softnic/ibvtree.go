package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/securedir"
	"github.com/softnic/softnic/verbs"
)

// Publishing a device for libibverbs programs (the C provider in
// provider/): with no kernel RDMA, libibverbs lists the devices it finds in
// $SYSFS_PATH/class/infiniband_verbs and opens /dev/infiniband/<cdev>,
// which must be a character device. The daemon writes a sysfs-like tree
// under RUNDIR/sysfs with what libibverbs reads there, and what programs
// read from /sys/class/infiniband themselves (UCX's GID types and netdevs,
// NCCL's device path, rdma-core's tests' device/net), and links
// /dev/infiniband/<device> to /dev/null. Each device also has a link in
// the view of its daemon's network namespace, RUNDIR/netns/INODE (INODE:
// /proc/self/ns/net's), a tree that shows the devices of that namespace
// only, as the kernel shows a netns its own devices (rdma netns mode
// exclusive); `softnic exec` and `softnic env` point SYSFS_PATH at the
// caller's (docs/HOST-INTERFACE.md, "libibverbs programs"). All is
// written relative to checked directories (package securedir): the run
// directory, and /dev/infiniband, which must be root's and writable by
// nobody else; no link at any name the daemon writes is followed.

const (
	// sysfsDir is the tree's directory under the run directory.
	sysfsDir = "sysfs"
	// cdevDir is where libibverbs opens device files; no variable moves it.
	cdevDir = "/dev/infiniband"
	// kernelABI is the uverbs ABI libibverbs checks (class/infiniband_verbs/abi_version).
	kernelABI = "6"
	// providerABI is the device's ABI, which the provider's match range holds.
	providerABI = "1"
	// nullRdev is /dev/null's device number, which the device file has.
	nullRdev = "1:3"
	// netnsDir holds the per-network-namespace views, under the run
	// directory.
	netnsDir = "netns"
	// softnicModalias is the modalias of a softnic device
	// (class/infiniband/NAME/device/modalias), by which the provider
	// knows its devices whatever their names.
	softnicModalias = "softnic"
)

// ibvTree is one device's entries in the tree and its device file.
type ibvTree struct {
	// run is the run directory; the tree is its sysfsDir.
	run  *securedir.Dir
	name string
	// cdev names the device file and the device's class/infiniband_verbs
	// entry: the device's name and a hash of the run directory, because
	// /dev/infiniband is the host's and daemons with other run
	// directories may serve interfaces of the same name in other network
	// namespaces (the tests' veth0).
	cdev string
	// iface is the interface the device serves; netns the inode of its
	// daemon's network namespace, which names the view the device is
	// linked in.
	iface    string
	netns    string
	log      *slog.Logger
	gids     []netip.Addr
	gidLen   int // the table's length, as written
	madeCdev bool
	stop     context.CancelFunc
	done     chan struct{}
}

// publishIBV writes the device's entries under runDir and its device file,
// and keeps the GID files current until the returned tree is removed,
// rewriting them whenever gidsChanged is signalled. runDir is the run
// directory as given, which names the device file; iface is the
// interface the device serves.
func publishIBV(run *securedir.Dir, runDir, name, iface string, dev *verbs.Device, log *slog.Logger,
	gidsChanged <-chan struct{}) (*ibvTree, error) {
	ns, err := netnsInode()
	if err != nil {
		return nil, err
	}
	t := &ibvTree{run: run, name: name, iface: iface, netns: ns, log: log, cdev: cdevName(runDir, name)}
	t.removeEntries() // what a killed daemon left
	if err := t.write(dev); err != nil {
		t.removeEntries()
		return nil, err
	}
	if err := t.linkCdev(); err != nil {
		t.removeEntries()
		return nil, err
	}
	if err := t.linkView(); err != nil {
		t.removeEntries()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	t.stop, t.done = stop, make(chan struct{})
	go t.follow(ctx, dev, gidsChanged)
	return t, nil
}

// verbsDir and devDir are the device's directories, relative to the run
// directory.
func (t *ibvTree) verbsDir() string { return path.Join(sysfsDir, "class", "infiniband_verbs") }
func (t *ibvTree) devDir() string   { return path.Join(sysfsDir, "class", "infiniband", t.name) }

// netnsInode returns the inode number of this process's network
// namespace, in decimal: what names a namespace while it lives (all
// namespaces are inodes of the one nsfs; `ip netns identify` compares them
// too).
func netnsInode() (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return "", fmt.Errorf("network namespace: %w", err)
	}
	return strconv.FormatUint(st.Ino, 10), nil
}

// viewDir is the view of network namespace ns, relative to the run
// directory.
func viewDir(ns string) string { return path.Join(netnsDir, ns) }

// cdevName is the device file's name for device name served from runDir.
func cdevName(runDir, name string) string {
	h := fnv.New32a()
	h.Write([]byte(runDir))
	return fmt.Sprintf("%s.%08x", name, h.Sum32())
}

// write creates the device's files: class/infiniband_verbs/NAME (ibdev,
// dev, abi_version) and class/infiniband/NAME (node type and GUID, port
// 1's P_Key and GID tables; device/: the modalias, the CPUs near the
// interface, and net/IFACE, a link to the interface's /sys/class/net
// entry, as a NIC's device/net holds its netdevs).
func (t *ibvTree) write(dev *verbs.Device) error {
	guid := fmtGUID(dev.NodeGUID())
	cpus, node := interfaceLocality(t.iface)
	files := map[string]string{
		path.Join(t.verbsDir(), "abi_version"):            kernelABI,
		path.Join(t.verbsDir(), t.cdev, "ibdev"):          t.name,
		path.Join(t.verbsDir(), t.cdev, "dev"):            nullRdev,
		path.Join(t.verbsDir(), t.cdev, "abi_version"):    providerABI,
		path.Join(t.devDir(), "node_type"):                "1: CA",
		path.Join(t.devDir(), "node_guid"):                guid,
		path.Join(t.devDir(), "sys_image_guid"):           guid,
		path.Join(t.devDir(), "fw_ver"):                   "0.0.0",
		path.Join(t.devDir(), "ports", "1", "pkeys", "0"): "0xffff",
		path.Join(t.devDir(), "ports", "1", "link_layer"): "Ethernet",
		path.Join(t.devDir(), "device", "modalias"):       softnicModalias,
		path.Join(t.devDir(), "device", "local_cpus"):     cpus,
		path.Join(t.devDir(), "device", "numa_node"):      node,
	}
	for rel, text := range files {
		if err := t.writeFile(rel, text); err != nil {
			return err
		}
	}
	if err := t.symlink(path.Join("/sys/class/net", t.iface), path.Join(t.devDir(), "device", "net", t.iface)); err != nil {
		return err
	}
	return t.writeGIDs(dev)
}

// interfaceLocality returns the local_cpus and numa_node of the device
// under interface iface (/sys/class/net/IFACE/device), or, for a virtual
// interface (a veth has no device), every online CPU and node -1, as the
// kernel says of a device on no NUMA node.
func interfaceLocality(iface string) (cpus, node string) {
	dev := filepath.Join("/sys/class/net", iface, "device")
	c, cerr := os.ReadFile(filepath.Join(dev, "local_cpus"))
	n, nerr := os.ReadFile(filepath.Join(dev, "numa_node"))
	if cerr == nil && nerr == nil {
		return strings.TrimSpace(string(c)), strings.TrimSpace(string(n))
	}
	online, _ := os.ReadFile("/sys/devices/system/cpu/online")
	possible, _ := os.ReadFile("/sys/devices/system/cpu/possible")
	return cpuMask(parseCPUList(string(online)), len(parseCPUList(string(possible)))), "-1"
}

// parseCPUList reads a CPU list such as "0-3,8" into a set of CPUs as a
// slice of flags, long enough for the highest one; nothing if malformed.
func parseCPUList(list string) []bool {
	nums, err := parseCPUs(strings.TrimSpace(list))
	if err != nil {
		return nil
	}
	var cpus []bool
	for _, c := range nums {
		for len(cpus) <= c {
			cpus = append(cpus, false)
		}
		cpus[c] = true
	}
	return cpus
}

// cpuMask formats the CPUs set in cpus as the kernel prints a cpumask of
// nbits bits (local_cpus): hex, a comma between 32-bit words, the first
// word as wide as its bits need.
func cpuMask(cpus []bool, nbits int) string {
	nbits = max(nbits, len(cpus), 1)
	var words []string
	for k := (nbits - 1) / 32; k >= 0; k-- {
		lo, hi := 32*k, min(32*k+32, nbits)
		var w uint32
		for i := lo; i < hi; i++ {
			if i < len(cpus) && cpus[i] {
				w |= 1 << (i - lo)
			}
		}
		words = append(words, fmt.Sprintf("%0*x", (hi-lo+3)/4, w))
	}
	return strings.Join(words, ",")
}

// writeGIDs writes port 1's GID table as libibverbs parses it, each file
// replaced whole (rename): the addresses' entries, then the empty ones up
// to the table's length (emptyGID), and drops entries beyond the table.
func (t *ibvTree) writeGIDs(dev *verbs.Device) error {
	var gids []netip.Addr
	for _, g := range dev.GIDTable() {
		gids = append(gids, netip.AddrFrom16(g))
	}
	if slices.Equal(gids, t.gids) {
		return nil
	}
	n := len(gids)
	if r := dev.RoCE(); r != nil {
		n = r.GIDTableLen()
	}
	port := path.Join(t.devDir(), "ports", "1")
	for i, g := range gids {
		if g.IsUnspecified() { // an address that went: an empty entry
			if err := t.writeEmptyGID(port, i); err != nil {
				return err
			}
			continue
		}
		if err := t.writeFile(path.Join(port, "gids", fmt.Sprint(i)), fmtGID(g)); err != nil {
			return err
		}
		t.removeAll(path.Join(port, "gid_attrs", "types", fmt.Sprint(i))) // an empty entry's link
		if err := t.writeFile(path.Join(port, "gid_attrs", "types", fmt.Sprint(i)), "RoCE v2"); err != nil {
			return err
		}
		if err := t.writeFile(path.Join(port, "gid_attrs", "ndevs", fmt.Sprint(i)), t.iface); err != nil {
			return err
		}
	}
	for i := len(gids); i < max(n, t.gidLen); i++ {
		t.removeAll(path.Join(port, "gid_attrs", "types", fmt.Sprint(i)))
		t.removeAll(path.Join(port, "gid_attrs", "ndevs", fmt.Sprint(i)))
		if i >= n {
			t.removeAll(path.Join(port, "gids", fmt.Sprint(i)))
			continue
		}
		if err := t.writeEmptyGID(port, i); err != nil {
			return err
		}
	}
	t.gids, t.gidLen = gids, n
	return nil
}

// writeEmptyGID writes entry i of port's GID table as an empty one: the
// zero GID, a type that cannot be read (emptyGIDType), no netdev.
func (t *ibvTree) writeEmptyGID(port string, i int) error {
	t.removeAll(path.Join(port, "gid_attrs", "types", fmt.Sprint(i)))
	t.removeAll(path.Join(port, "gid_attrs", "ndevs", fmt.Sprint(i)))
	if err := t.writeFile(path.Join(port, "gids", fmt.Sprint(i)), fmtGID(netip.IPv6Unspecified())); err != nil {
		return err
	}
	return t.symlink(emptyGIDType, path.Join(port, "gid_attrs", "types", fmt.Sprint(i)))
}

// emptyGIDType is what an empty entry's gid_attrs/types file links to: a
// file whose read fails with EINVAL, as the kernel's read of an empty
// entry's type does. libibverbs' sysfs fallback of ibv_query_gid_ex and
// ibv_query_gid_table tells an empty entry by that EINVAL and the zero GID
// (ENODATA, the entry skipped); a plain file cannot fail a read, and any
// other failure makes the query fail. The loopback's link speed is such a
// file in every network namespace (it has no link settings), outside
// /sys/class, which softnic exec's view replaces.
const emptyGIDType = "/sys/devices/virtual/net/lo/speed"

// follow rewrites the GID table each time the device's changes (an
// address added or removed, an IPv6 address that joins once duplicate
// address detection is over: followInterface signals changed).
func (t *ibvTree) follow(ctx context.Context, dev *verbs.Device, changed <-chan struct{}) {
	defer close(t.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if err := t.writeGIDs(dev); err != nil {
				t.log.Warn("GID table for libibverbs", "device", t.name, "err", err)
			}
		}
	}
}

// linkCdev makes /dev/infiniband/NAME a link to /dev/null, replacing
// what a killed daemon left there.
func (t *ibvTree) linkCdev() error {
	dir, err := securedir.Open("device directory", cdevDir, true)
	if err != nil {
		return fmt.Errorf("device file: %w", err)
	}
	defer dir.Close()
	if err := dir.Symlink("/dev/null", t.cdev); err != nil {
		return fmt.Errorf("device file: %w", err)
	}
	t.madeCdev = true
	return nil
}

// linkView links the device's entries into the view of its network
// namespace: RUNDIR/netns/INODE/class/infiniband/NAME and
// class/infiniband_verbs/CDEV, relative links to the tree's, and
// class/infiniband_verbs/abi_version.
func (t *ibvTree) linkView() error {
	class := path.Join(viewDir(t.netns), "class")
	up := "../../../../" + sysfsDir + "/class/"
	links := [][2]string{
		{up + "infiniband/" + t.name, path.Join(class, "infiniband", t.name)},
		{up + "infiniband_verbs/" + t.cdev, path.Join(class, "infiniband_verbs", t.cdev)},
		{up + "infiniband_verbs/abi_version", path.Join(class, "infiniband_verbs", "abi_version")},
	}
	for _, l := range links {
		if err := t.symlink(l[0], l[1]); err != nil {
			return err
		}
	}
	return nil
}

// unlinkViews removes the device's links from the view of every
// namespace (a killed daemon's may be in another's than this one's), and
// what is left of a view once no device is in it.
func (t *ibvTree) unlinkViews() {
	dir, err := t.run.OpenDir(netnsDir)
	if err != nil {
		return
	}
	views, _ := dir.Names()
	dir.Close()
	for _, ns := range views {
		class := path.Join(viewDir(ns), "class")
		t.removeLink(path.Join(class, "infiniband", t.name))
		t.removeLink(path.Join(class, "infiniband_verbs", t.cdev))
		t.removeLonelyABI(path.Join(class, "infiniband_verbs"))
		t.removeEmpty(path.Join(class, "infiniband_verbs"), path.Join(class, "infiniband"), class, viewDir(ns))
	}
	t.removeEmpty(netnsDir)
}

// removeLink removes the link rel, only if it is one.
func (t *ibvTree) removeLink(rel string) {
	if dir, err := t.run.OpenDir(path.Dir(rel)); err == nil {
		if _, err := dir.Readlink(path.Base(rel)); err == nil {
			dir.Remove(path.Base(rel))
		}
		dir.Close()
	}
}

// removeLonelyABI removes the abi_version of class/infiniband_verbs
// directory rel once no device is left beside it.
func (t *ibvTree) removeLonelyABI(rel string) {
	if dir, err := t.run.OpenDir(rel); err == nil {
		if names, err := dir.Names(); err == nil && len(names) == 1 && names[0] == "abi_version" {
			dir.Remove("abi_version")
		}
		dir.Close()
	}
}

// removeEmpty removes each of the directories rels (relative to the run
// directory), in order, if it is empty.
func (t *ibvTree) removeEmpty(rels ...string) {
	for _, d := range rels {
		if dir, err := t.run.OpenDir(d); err == nil {
			dir.RemoveIfEmpty() // only if empty
			dir.Close()
		}
	}
}

// remove takes the device's entries and device file away, and the tree's
// shared files and directories once no other device is in it.
func (t *ibvTree) remove() {
	t.stop()
	<-t.done
	t.removeEntries()
}

func (t *ibvTree) removeEntries() {
	if dir, err := securedir.Open("device directory", cdevDir, false); err == nil {
		if target, err := dir.Readlink(t.cdev); err == nil && target == "/dev/null" {
			dir.Remove(t.cdev)
		}
		dir.RemoveIfEmpty()
		dir.Close()
	}
	t.unlinkViews()
	t.removeAll(path.Join(t.verbsDir(), t.cdev))
	t.removeAll(t.devDir())
	t.removeLonelyABI(t.verbsDir())
	t.removeEmpty(t.verbsDir(), path.Join(sysfsDir, "class", "infiniband"), path.Join(sysfsDir, "class"), sysfsDir)
}

// removeAll removes rel (relative to the run directory) and what is below
// it, following no link.
func (t *ibvTree) removeAll(rel string) {
	if dir, err := t.run.OpenDir(path.Dir(rel)); err == nil {
		dir.RemoveAll(path.Base(rel))
		dir.Close()
	}
}

// writeFile writes text and a newline to rel (relative to the run
// directory) through a temporary file, so that a reader sees the old file
// or the new one; a link at either name, or in place of a directory on
// the way, is replaced, not followed.
func (t *ibvTree) writeFile(rel, text string) error {
	dir, err := t.run.MkdirAll(path.Dir(rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.WriteFile(path.Base(rel), []byte(text+"\n"), 0o644)
}

// symlink makes rel (relative to the run directory) a link to target, the
// directories on the way made as writeFile makes them.
func (t *ibvTree) symlink(target, rel string) error {
	dir, err := t.run.MkdirAll(path.Dir(rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Symlink(target, path.Base(rel))
}

// fmtGID writes a GID as sysfs does: eight groups of four hex digits.
func fmtGID(a netip.Addr) string {
	b := a.As16()
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(parts, ":")
}

// fmtGUID writes a GUID as sysfs does: four groups of four hex digits.
func fmtGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// errNoTree is returned when the run directory has no published device.
var errNoTree = errors.New("no device published for libibverbs (is softnic daemon running?)")

// publishedDevices maps the devices in runDir's tree to their
// class/infiniband_verbs entries.
func publishedDevices(runDir string) (map[string]string, error) {
	dir := filepath.Join(runDir, sysfsDir, "class", "infiniband_verbs")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoTree
	}
	devs := map[string]string{}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "ibdev")); err == nil && e.IsDir() {
			devs[strings.TrimSpace(string(b))] = e.Name()
		}
	}
	if len(devs) == 0 && err == nil {
		err = errNoTree
	}
	return devs, err
}
