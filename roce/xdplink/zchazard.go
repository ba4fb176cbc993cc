package xdplink

import (
	"os"
	"path/filepath"
)

// A driver whose zero-copy transmit path is known to lose frames. virtio-net
// sends every AF_XDP zero-copy frame behind one virtio-net header it keeps
// as a static variable, DMA-mapped as if it were in the kernel's linear
// map. Built as a loadable module (Debian's, Ubuntu's) that variable lives
// in module memory, whose address translates to an unrelated guest
// physical page, different at each boot under KASLR: where that page is
// RAM holding anything but zeros, the host reads a nonsense header and
// drops (or mangles) every zero-copy frame while the driver completes
// them. Copy mode builds a header per frame and is not affected.

// sysfsRoot is where zeroCopyHazard reads the interface's driver (tests
// point it elsewhere).
var sysfsRoot = "/sys"

// zeroCopyHazard returns why ifname's zero-copy transmit path is not to be
// trusted, or "" when nothing is known against it.
func zeroCopyHazard(ifname string) string {
	drv, err := os.Readlink(filepath.Join(sysfsRoot, "class/net", ifname, "device/driver"))
	if err != nil || filepath.Base(drv) != "virtio_net" {
		return ""
	}
	// Only a loadable module has an initstate; a built-in one's header is
	// in the linear map and translates right.
	if _, err := os.Stat(filepath.Join(sysfsRoot, "module/virtio_net/initstate")); err != nil {
		return ""
	}
	return "virtio_net is a loadable module: its zero-copy transmit path DMA-maps a header in module memory, " +
		"which the device may read from an unrelated page and then drop every frame"
}
