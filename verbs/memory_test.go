package verbs

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/roce/memlink"
)

// TestMemoryChecks checks the key lookups the engine makes through a PD
// (ibtransport.Memory) and the views it keeps: bounds, rights, protection
// domain, rkey invalidation and deregistration.
func TestMemoryChecks(t *testing.T) {
	la, lb := memlink.Pair(memlink.Config{})
	d, err := Open(la, Config{Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.1")}})
	require.NoError(t, err)
	t.Cleanup(func() { la.Close(); lb.Close() })
	// With the engine goroutine stopped, Engine.Do runs on the test's
	// goroutine, which may then look at the key table the engine owns.
	require.NoError(t, d.Close())
	pd, other := d.AllocPD(), d.AllocPD()
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf[1024:3072], AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	ro, err := pd.RegMR(buf[:1024], AccessRemoteRead)
	require.NoError(t, err)
	mem, otherMem := (*pdMemory)(pd), (*pdMemory)(other)
	a := mr.Addr()
	onEngine := func(fn func()) { require.NoError(t, d.group.Do(func() error { fn(); return nil })) }
	onEngine(func() {
		require.NotNil(t, mem.LocalRegion(mr.LKey(), a, 2048, AccessLocalWrite))
		require.NotNil(t, mem.RemoteRegion(mr.RKey(), a+2047, 1, AccessRemoteWrite))
		require.NotNil(t, mem.LocalRegion(mr.LKey(), a+2048, 0, 0), "empty access at the end")
		for _, c := range []struct {
			name string
			r    ibtransport.Region
		}{
			{"past the end", mem.LocalRegion(mr.LKey(), a+1, 2048, 0)},
			{"before the start", mem.RemoteRegion(mr.RKey(), a-1, 1, AccessRemoteWrite)},
			{"length wraps", mem.RemoteRegion(mr.RKey(), a+8, ^uint32(0), AccessRemoteWrite)},
			{"address wraps", mem.RemoteRegion(mr.RKey(), ^uint64(0), 2, AccessRemoteWrite)},
			{"right not granted", mem.RemoteRegion(mr.RKey(), a, 8, AccessRemoteRead)},
			{"local write on a read-only region", mem.LocalRegion(ro.LKey(), ro.Addr(), 8, AccessLocalWrite)},
			{"rkey used as lkey", mem.LocalRegion(mr.RKey(), a, 8, 0)},
			{"lkey used as rkey", mem.RemoteRegion(mr.LKey(), a, 8, AccessRemoteWrite)},
			{"other PD", otherMem.RemoteRegion(mr.RKey(), a, 8, AccessRemoteWrite)},
		} {
			require.Nil(t, c.r, c.name)
		}
		// A view checks bounds on every slice.
		v := mem.RemoteRegion(mr.RKey(), a, 8, AccessRemoteWrite)
		b, ok := v.Slice(a+100, 10)
		require.True(t, ok)
		require.Len(t, b, 10)
		_, ok = v.Slice(a+2040, 10)
		require.False(t, ok)
		// SEND_WITH_INV: only the PD's own regions; the rkey dies, the
		// lkey lives.
		local := mem.LocalRegion(mr.LKey(), a, 8, 0)
		require.False(t, otherMem.InvalidateRKey(mr.RKey()))
		require.True(t, mem.InvalidateRKey(mr.RKey()))
		require.False(t, mem.InvalidateRKey(mr.RKey()))
		require.Nil(t, mem.RemoteRegion(mr.RKey(), a, 8, AccessRemoteWrite))
		_, ok = v.Slice(a, 8)
		require.False(t, ok, "a view taken before the invalidation")
		_, ok = local.Slice(a, 8)
		require.True(t, ok)
	})
	localRO := ibtransport.Region(nil)
	onEngine(func() { localRO = mem.LocalRegion(ro.LKey(), ro.Addr(), 8, 0) })
	require.NoError(t, ro.Dereg())
	onEngine(func() {
		require.Nil(t, mem.LocalRegion(ro.LKey(), ro.Addr(), 8, 0))
		_, ok := localRO.Slice(ro.Addr(), 8)
		require.False(t, ok, "a view of a deregistered region")
	})
	require.ErrorIs(t, ro.Dereg(), ErrInvalidArgument)
}
