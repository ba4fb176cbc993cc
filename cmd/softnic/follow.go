package main

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

// The daemon's device follows its interface as a kernel RoCE device
// follows its netdev (rxe, mlx5): it waits for the interface to exist and
// be up rather than refusing to start, and while it runs its port's
// active MTU follows the interface's MTU and its GID table the
// interface's addresses. Its port state follows the link's state
// (xdplink.WatchOperState, device.go).

// waitForInterface returns once the interface named ifname exists and is
// up, having said once that it waits, or with ctx's error.
func waitForInterface(ctx context.Context, ifname string, log *slog.Logger) error {
	return xdplink.WaitUp(ctx, ifname, func(state string) {
		log.Info("waiting for interface", "interface", ifname, "state", state)
	})
}

// followInterface makes dev, served on interface ifname (with index
// ifindex) over link, follow the interface's MTU and addresses until
// done is closed, saying each change in log and calling gidsChanged
// after the GID table changed.
func followInterface(ifname string, ifindex int, link *xdplink.Link, dev *verbs.Device, log *slog.Logger,
	gidsChanged func(), done <-chan struct{}) error {
	// From what the link and the device have: a change since they were
	// opened is one still to follow. No GIDs: the first listing gives
	// them, and the device's table changes only if they differ.
	mtu := link.MTU()
	nd := &xdplink.Netdev{Name: ifname, Index: ifindex, MTU: mtu}
	return xdplink.Follow(nd, done, xdplink.NetdevChanges{
		MTU: func(newMTU int) {
			got := link.SetMTU(newMTU)
			active := dev.ActiveMTU().Bytes()
			args := []any{"interface", ifname, "old", mtu, "new", newMTU, "active_mtu", active}
			mtu = newMTU
			switch {
			case active < roce.ActiveIBMTU(newMTU):
				// The frames were sized for today's MTU only (no
				// multi-buffer: xdplink.Config.CarryMTU).
				log.Warn("mtu changed beyond what the daemon's frames carry: active_mtu clamped (restart the daemon to carry it)",
					append(args, "carried", got)...)
			case got < newMTU:
				// IB packets are no larger than 4096 bytes; raw packet
				// QPs' frames are, up to the carried MTU.
				log.Info("mtu changed", append(args, "raw_frames_mtu", got)...)
			default:
				log.Info("mtu changed", args...)
			}
		},
		GIDs: func(gids []netip.Addr) {
			changes := dev.SetAddrs(gids)
			if len(changes) > 0 {
				gidsChanged()
			}
			for _, c := range changes {
				steerAddr(link, c, log)
				what := "gid removed"
				if c.Added {
					what = "gid added"
				}
				log.Info(what, "interface", ifname, "index", c.Index, "addr", c.Addr)
			}
		},
	})
}

// steerAddr tells the link's XDP program of an address the GID table
// gained or lost: RoCEv2 frames to it come to softnic, or stay with the
// kernel.
func steerAddr(link *xdplink.Link, c roce.GIDChange, log *slog.Logger) {
	var err error
	if c.Added {
		err = link.Program().AddAddr(c.Addr)
	} else {
		err = link.Program().RemoveAddr(c.Addr)
	}
	if err != nil {
		log.Warn("XDP steering of an address", "addr", c.Addr, "added", c.Added, "err", err)
	}
}
