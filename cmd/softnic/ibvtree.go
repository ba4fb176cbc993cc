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
	"strings"
	"time"

	"github.com/softnic/softnic/internal/securedir"
	"github.com/softnic/softnic/verbs"
)

// Publishing a device for libibverbs programs (the C provider in
// provider/): with no kernel RDMA, libibverbs lists the devices it finds in
// $SYSFS_PATH/class/infiniband_verbs and opens /dev/infiniband/<cdev>,
// which must be a character device. The daemon writes a sysfs-like tree
// under RUNDIR/sysfs with what libibverbs reads there, and links
// /dev/infiniband/<device> to /dev/null; `softnic exec` points SYSFS_PATH
// at the tree (docs/HOST-INTERFACE.md, "libibverbs programs"). Both are
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
	cdev     string
	log      *slog.Logger
	gids     []netip.Addr
	madeCdev bool
	stop     context.CancelFunc
	done     chan struct{}
}

// publishIBV writes the device's entries under runDir and its device file,
// and keeps the GID files current until the returned tree is removed.
// runDir is the run directory as given, which names the device file.
func publishIBV(run *securedir.Dir, runDir, name string, dev *verbs.Device, log *slog.Logger) (*ibvTree, error) {
	t := &ibvTree{run: run, name: name, log: log, cdev: cdevName(runDir, name)}
	t.removeEntries() // what a killed daemon left
	if err := t.write(dev); err != nil {
		t.removeEntries()
		return nil, err
	}
	if err := t.linkCdev(); err != nil {
		t.removeEntries()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	t.stop, t.done = stop, make(chan struct{})
	go t.follow(ctx, dev)
	return t, nil
}

// verbsDir and devDir are the device's directories, relative to the run
// directory.
func (t *ibvTree) verbsDir() string { return path.Join(sysfsDir, "class", "infiniband_verbs") }
func (t *ibvTree) devDir() string   { return path.Join(sysfsDir, "class", "infiniband", t.name) }

// cdevName is the device file's name for device name served from runDir.
func cdevName(runDir, name string) string {
	h := fnv.New32a()
	h.Write([]byte(runDir))
	return fmt.Sprintf("%s.%08x", name, h.Sum32())
}

// write creates the device's files: class/infiniband_verbs/NAME (ibdev,
// dev, abi_version) and class/infiniband/NAME (node type and GUID, port
// 1's P_Key and GID tables).
func (t *ibvTree) write(dev *verbs.Device) error {
	guid := fmtGUID(dev.NodeGUID())
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
	}
	for rel, text := range files {
		if err := t.writeFile(rel, text); err != nil {
			return err
		}
	}
	return t.writeGIDs(dev)
}

// writeGIDs writes port 1's GID table as libibverbs parses it, each file
// replaced whole (rename), and drops entries beyond the table.
func (t *ibvTree) writeGIDs(dev *verbs.Device) error {
	var gids []netip.Addr
	for _, g := range dev.GIDTable() {
		gids = append(gids, netip.AddrFrom16(g))
	}
	if slices.Equal(gids, t.gids) {
		return nil
	}
	port := path.Join(t.devDir(), "ports", "1")
	for i, g := range gids {
		if err := t.writeFile(path.Join(port, "gids", fmt.Sprint(i)), fmtGID(g)); err != nil {
			return err
		}
		if err := t.writeFile(path.Join(port, "gid_attrs", "types", fmt.Sprint(i)), "RoCE v2"); err != nil {
			return err
		}
	}
	for i := len(gids); i < len(t.gids); i++ {
		t.removeAll(path.Join(port, "gids", fmt.Sprint(i)))
		t.removeAll(path.Join(port, "gid_attrs", "types", fmt.Sprint(i)))
	}
	t.gids = gids
	return nil
}

// follow rewrites the GID table when the interface's addresses change
// (an IPv6 address joins once duplicate address detection is over).
func (t *ibvTree) follow(ctx context.Context, dev *verbs.Device) {
	defer close(t.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
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
	t.removeAll(path.Join(t.verbsDir(), t.cdev))
	t.removeAll(t.devDir())
	if dir, err := t.run.OpenDir(t.verbsDir()); err == nil {
		if names, err := dir.Names(); err == nil && len(names) == 1 && names[0] == "abi_version" {
			dir.Remove("abi_version")
		}
		dir.Close()
	}
	for _, d := range []string{t.verbsDir(), path.Join(sysfsDir, "class", "infiniband"), path.Join(sysfsDir, "class"), sysfsDir} {
		if dir, err := t.run.OpenDir(d); err == nil {
			dir.RemoveIfEmpty() // only if empty
			dir.Close()
		}
	}
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
