package xdplink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// WaitUp returns once the interface named ifname exists in the calling
// thread's network namespace and is set up (IFF_UP: what Open needs; its
// carrier is the port's state, WatchOperState), or with ctx's error. It
// learns both from the kernel's link announcements, not by polling: a
// link created, renamed or set up. If the interface is not up when WaitUp
// starts, it calls waiting once with its state ("absent" or "down")
// before it waits.
func WaitUp(ctx context.Context, ifname string, waiting func(state string)) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("wait for %s: network namespace: %w", ifname, err)
	}
	defer ns.Close()
	done := make(chan struct{})
	defer close(done)
	told := false
	for {
		// Subscribed first, then looked at: a change in between is
		// announced on ch.
		ch, err := subscribeLinks(ns, done, false)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", ifname, err)
		}
		state := "absent"
		if l, err := netlink.LinkByName(ifname); err == nil {
			if l.Attrs().Flags&net.FlagUp != 0 {
				return nil
			}
			state = "down"
		}
		if !told {
			told = true
			waiting(state)
		}
		for open := true; open; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case u, ok := <-ch:
				open = ok
				if ok && u.Attrs().Name == ifname && u.Attrs().Flags&net.FlagUp != 0 && u.Header.Type != unix.RTM_DELLINK {
					return nil
				}
			}
		}
		// The subscription ended (an overrun socket): again, after a pause.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(resubscribeAfter):
		}
	}
}

// NetdevChanges are what Follow calls when the interface changes. Each
// is called from one goroutine, one call at a time.
type NetdevChanges struct {
	// MTU gets the interface's new MTU.
	MTU func(mtu int)
	// GIDs gets the interface's addresses in GID-table order (GIDTable)
	// each time they change.
	GIDs func(gids []netip.Addr)
}

// Follow tells ch of every change of nd's MTU and addresses, as the
// kernel announces them (netlink link and address subscriptions), until
// done is closed. nd is what the caller knows: the changes are those
// from it. It returns once the subscriptions are in place, or their
// error.
func Follow(nd *Netdev, done <-chan struct{}, ch NetdevChanges) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("follow %s: network namespace: %w", nd.Name, err)
	}
	f := &follower{ns: ns, ifindex: nd.Index, mtu: nd.MTU, gids: slices.Clone(nd.GIDs), ch: ch, done: done}
	links, addrs, err := f.subscribe(nil, nil)
	if err != nil {
		ns.Close() // a links subscription made ends with done
		return fmt.Errorf("follow %s: %w", nd.Name, err)
	}
	go f.run(links, addrs)
	return nil
}

// follower is one Follow's state, kept by its goroutine.
type follower struct {
	ns      netns.NsHandle
	ifindex int
	mtu     int
	gids    []netip.Addr
	ch      NetdevChanges
	done    <-chan struct{}
}

// subscribe subscribes to the namespace's link and address
// announcements, those of links and addrs that are nil (ended). What
// changed since the caller looked, or while a subscription was being
// made again, the goroutine reads once subscribed (sync).
func (f *follower) subscribe(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate) (chan netlink.LinkUpdate, chan netlink.AddrUpdate, error) {
	var err error
	if links == nil {
		if links, err = subscribeLinks(f.ns, f.done, false); err != nil {
			return nil, addrs, err
		}
	}
	if addrs == nil {
		if addrs, err = subscribeAddrs(f.ns, f.done); err != nil {
			return links, nil, err
		}
	}
	return links, addrs, nil
}

// sync reads the interface's MTU and addresses and reports what changed.
func (f *follower) sync() {
	if l, err := netlink.LinkByIndex(f.ifindex); err == nil {
		f.mtuIs(l.Attrs().MTU)
	}
	f.readGIDs()
}

// mtuIs reports the interface's MTU if it changed.
func (f *follower) mtuIs(mtu int) {
	if mtu != f.mtu && mtu > 0 {
		f.mtu = mtu
		f.ch.MTU(mtu)
	}
}

func (f *follower) run(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate) {
	defer f.ns.Close()
	for {
		f.sync()
		for links != nil && addrs != nil {
			select {
			case u, ok := <-links:
				if !ok {
					links = nil
				} else if int(u.Index) == f.ifindex && u.Header.Type != unix.RTM_DELLINK {
					f.mtuIs(u.Attrs().MTU)
				}
			case u, ok := <-addrs:
				if !ok {
					addrs = nil
				} else if u.LinkIndex == f.ifindex {
					f.readGIDs()
				}
			}
		}
		// A subscription ended: done, or an error (an overrun socket
		// buffer ends vishvananda/netlink's); it again, after a pause.
		for links == nil || addrs == nil {
			select {
			case <-f.done:
				return
			case <-time.After(resubscribeAfter):
			}
			links, addrs, _ = f.subscribe(links, addrs)
		}
	}
}

// readGIDs reads the interface's GID table and calls GIDs if it changed.
// An interface with no address left has a table of its default GID.
func (f *follower) readGIDs() {
	l, err := netlink.LinkByIndex(f.ifindex)
	if err != nil {
		return
	}
	gids, err := gidTable(l)
	if err != nil && !errors.Is(err, ErrNoAddresses) {
		return
	}
	if !slices.Equal(gids, f.gids) {
		f.gids = gids
		f.ch.GIDs(slices.Clone(gids))
	}
}

// subscribeAddrs is subscribeLinks for address announcements, without
// a listing.
func subscribeAddrs(ns netns.NsHandle, done <-chan struct{}) (chan netlink.AddrUpdate, error) {
	ch := make(chan netlink.AddrUpdate, 16)
	opts := netlink.AddrSubscribeOptions{Namespace: &ns, ErrorCallback: func(error) {}}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cur, err := netns.Get(); err == nil {
		if cur.Equal(ns) {
			opts.Namespace = nil
		}
		cur.Close()
	}
	err := netlink.AddrSubscribeWithOptions(ch, done, opts)
	return ch, err
}
