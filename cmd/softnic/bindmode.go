package main

import (
	"flag"
	"fmt"

	"github.com/softnic/softnic/xdp"
)

// bindMode is --xdp-bind, the AF_XDP sockets' bind mode
// (xdplink.Config.Socket.Mode), package-wide like keepIRQs: zero-copy
// where the driver offers it unless told otherwise.
var bindMode xdp.Mode

// bindModeFlag parses auto, copy or zerocopy.
type bindModeFlag struct{ m *xdp.Mode }

func (f bindModeFlag) String() string {
	if f.m == nil {
		return "auto"
	}
	switch *f.m {
	case xdp.ModeCopy:
		return "copy"
	case xdp.ModeZeroCopy:
		return "zerocopy"
	}
	return "auto"
}

func (f bindModeFlag) Set(s string) error {
	switch s {
	case "auto":
		*f.m = xdp.ModeAuto
	case "copy":
		*f.m = xdp.ModeCopy
	case "zerocopy", "zero-copy":
		*f.m = xdp.ModeZeroCopy
	default:
		return fmt.Errorf("want auto, copy or zerocopy, not %q", s)
	}
	return nil
}

const bindModeUsage = "`MODE` the AF_XDP sockets bind in: auto (zero-copy where the driver offers it, else copy), " +
	"copy, or zerocopy (fail where the driver has none)"

func defineBindMode(fs *flag.FlagSet, name string) {
	bindMode = xdp.ModeAuto
	fs.Var(bindModeFlag{&bindMode}, name, bindModeUsage)
}
