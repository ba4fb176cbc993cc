package xdplink

import (
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// operUp reports whether a link is operationally up: the port state a
// RoCE device shows for it (ACTIVE rather than DOWN), as rxe follows its
// netdev's carrier. A link that reports no operational state (UNKNOWN,
// as some virtual devices do) counts as up when it is administratively
// up.
func operUp(a *netlink.LinkAttrs) bool {
	return a.OperState == netlink.OperUp || (a.OperState == netlink.OperUnknown && a.Flags&net.FlagUp != 0)
}

// resubscribeAfter is how long WatchOperState waits before it subscribes
// again when the kernel ended its subscription (a receive error, such as
// an overrun socket buffer, ends vishvananda/netlink's).
const resubscribeAfter = 100 * time.Millisecond

// WatchOperState calls changed with the operational state of the
// interface with index ifindex, in the calling thread's network
// namespace, each time it changes, until done is closed: first with the
// state when the watch starts, then with every change the kernel
// announces (carrier lost or back, the link set down or up). The calls
// come one at a time from one goroutine. It returns once the first
// subscription is in place, or its error.
func WatchOperState(ifindex int, done <-chan struct{}, changed func(up bool)) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("watch link state: network namespace: %w", err)
	}
	ch, err := subscribeLinks(ns, done, true)
	if err != nil {
		ns.Close()
		return fmt.Errorf("watch link state: %w", err)
	}
	go func() {
		defer ns.Close()
		known, last := false, false
		for {
			for u := range ch {
				if int(u.Index) != ifindex {
					continue
				}
				if up := operUp(u.Link.Attrs()); !known || up != last {
					known, last = true, up
					changed(up)
				}
			}
			// The subscription ended: done, or an error; a new one lists
			// the links again, so a change missed meanwhile is seen.
			for {
				select {
				case <-done:
					return
				case <-time.After(resubscribeAfter):
				}
				if ch, err = subscribeLinks(ns, done, true); err == nil {
					break
				}
			}
		}
	}()
	return nil
}

// subscribeLinks subscribes to namespace ns's link announcements,
// starting with a listing of every link if list is set (which
// vishvananda/netlink asks for in a way that needs CAP_NET_ADMIN); the
// channel closes when the subscription ends. A thread already in ns subscribes from there: joining
// a namespace (setns, even the thread's own) needs CAP_SYS_ADMIN, which
// softnic daemon has given up by the time it subscribes again.
func subscribeLinks(ns netns.NsHandle, done <-chan struct{}, list bool) (chan netlink.LinkUpdate, error) {
	ch := make(chan netlink.LinkUpdate, 16)
	opts := netlink.LinkSubscribeOptions{Namespace: &ns, ListExisting: list, ErrorCallback: func(error) {}}
	runtime.LockOSThread() // the socket is made in this thread's namespace
	defer runtime.UnlockOSThread()
	if cur, err := netns.Get(); err == nil {
		if cur.Equal(ns) {
			opts.Namespace = nil
		}
		cur.Close()
	}
	err := netlink.LinkSubscribeWithOptions(ch, done, opts)
	return ch, err
}
