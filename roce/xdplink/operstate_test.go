package xdplink

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/netnstest"
)

// TestWatchOperState watches end A's veth while end B goes down (A loses
// its carrier), comes back, and A itself is set down and up: the watch
// reports the state at its start, then each change once.
func TestWatchOperState(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	states := make(chan bool, 16)
	done := make(chan struct{})
	defer close(done)
	require.NoError(t, pair.A.Do(func() error {
		return WatchOperState(pair.A.Ifindex, done, func(up bool) { states <- up })
	}))
	next := func(what string) bool {
		t.Helper()
		select {
		case up := <-states:
			return up
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no state reported", what)
			return false
		}
	}
	setUp := func(e *netnstest.End, up bool) {
		t.Helper()
		require.NoError(t, e.Do(func() error {
			l, err := netlink.LinkByName(e.Ifname)
			if err != nil {
				return err
			}
			if up {
				return netlink.LinkSetUp(l)
			}
			return netlink.LinkSetDown(l)
		}))
	}
	assert.True(t, next("start"), "the state at the start")
	setUp(&pair.B, false)
	assert.False(t, next("peer down"), "A without carrier")
	setUp(&pair.B, true)
	assert.True(t, next("peer up"), "A with carrier again")
	setUp(&pair.A, false)
	assert.False(t, next("A down"))
	setUp(&pair.A, true)
	assert.True(t, next("A up"))
	select {
	case up := <-states:
		t.Fatalf("a report with no change: %v", up)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestSubscribeLinksWithoutSysAdmin: a thread in the namespace subscribes
// (again, after an overrun) without CAP_SYS_ADMIN, which softnic daemon no
// longer has then.
func TestSubscribeLinksWithoutSysAdmin(t *testing.T) {
	err := netnstest.WithoutCapabilities([]int{unix.CAP_SYS_ADMIN}, func() error {
		ns, err := netns.Get()
		if err != nil {
			return err
		}
		defer ns.Close()
		done := make(chan struct{})
		defer close(done)
		ch, err := subscribeLinks(ns, done, true)
		if err != nil {
			return err
		}
		select {
		case <-ch: // the listing of the links
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("no link listed")
		}
	})
	require.NoError(t, err)
}
