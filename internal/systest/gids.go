package systest

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/roce/xdplink"
)

// SettledGIDs waits until the end's GID table, as softnic reads it from
// the interface, holds want entries (IPv6 addresses join it once
// duplicate address detection is over), for at most 10 s, and returns
// it: the link-local address, then the end's addresses in
// xdplink.GIDTable's order (IPv4 first).
func SettledGIDs(t testing.TB, e *netnstest.End, want int) []netip.Addr {
	t.Helper()
	var gids []netip.Addr
	for try := 0; try < 100; try++ {
		err := e.Do(func() error {
			var err error
			gids, err = xdplink.GIDTable(e.Ifname)
			return err
		})
		if err != nil {
			t.Fatalf("GID table of %s: %v", e.Ifname, err)
		}
		if len(gids) >= want {
			return gids
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GID table of %s: %v, want %d entries", e.Ifname, gids, want)
	return nil
}
