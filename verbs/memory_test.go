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
	mem, otherMem := pd.ops.(*enginePD), other.ops.(*enginePD)
	a := mr.Addr()
	onEngine := func(fn func()) { require.NoError(t, d.ops.(*engine).group.Do(func() error { fn(); return nil })) }
	onEngine(func() {
		require.NotNil(t, mem.LocalRegion(mr.LKey(), a, 2048, AccessLocalWrite))
		require.NotNil(t, mem.RemoteRegion(nil, mr.RKey(), a+2047, 1, AccessRemoteWrite))
		require.NotNil(t, mem.LocalRegion(mr.LKey(), a+2048, 0, 0), "empty access at the end")
		for _, c := range []struct {
			name string
			r    ibtransport.Region
		}{
			{"past the end", mem.LocalRegion(mr.LKey(), a+1, 2048, 0)},
			{"before the start", mem.RemoteRegion(nil, mr.RKey(), a-1, 1, AccessRemoteWrite)},
			{"length wraps", mem.RemoteRegion(nil, mr.RKey(), a+8, ^uint32(0), AccessRemoteWrite)},
			{"address wraps", mem.RemoteRegion(nil, mr.RKey(), ^uint64(0), 2, AccessRemoteWrite)},
			{"right not granted", mem.RemoteRegion(nil, mr.RKey(), a, 8, AccessRemoteRead)},
			{"local write on a read-only region", mem.LocalRegion(ro.LKey(), ro.Addr(), 8, AccessLocalWrite)},
			{"rkey used as lkey", mem.LocalRegion(mr.RKey(), a, 8, 0)},
			{"lkey used as rkey", mem.RemoteRegion(nil, mr.LKey(), a, 8, AccessRemoteWrite)},
			{"other PD", otherMem.RemoteRegion(nil, mr.RKey(), a, 8, AccessRemoteWrite)},
		} {
			require.Nil(t, c.r, c.name)
		}
		// A view checks bounds on every access.
		v := mem.RemoteRegion(nil, mr.RKey(), a, 8, AccessRemoteWrite)
		require.True(t, v.WriteAt([]byte("0123456789"), a+100))
		require.Equal(t, []byte("0123456789"), mr.Bytes()[100:110])
		b := make([]byte, 10)
		require.True(t, v.ReadAt(b, a+100))
		require.Equal(t, []byte("0123456789"), b)
		require.False(t, v.ReadAt(b, a+2040))
		require.False(t, v.WriteAt(b, a+2040))
		_, ok := v.Atomic(a+4, false, 0, 1)
		require.False(t, ok, "a word not aligned")
		require.True(t, v.WriteAt(make([]byte, 8), a+96))
		orig, ok := v.Atomic(a+96, true, 0, 7)
		require.True(t, ok)
		require.Zero(t, orig)
		orig, ok = v.Atomic(a+96, false, 0, 1)
		require.True(t, ok)
		require.EqualValues(t, 7, orig)
		// SEND_WITH_INV: only the PD's own regions; the rkey dies, the
		// lkey lives.
		local := mem.LocalRegion(mr.LKey(), a, 8, 0)
		require.False(t, otherMem.InvalidateRKey(nil, mr.RKey(), true))
		require.True(t, mem.InvalidateRKey(nil, mr.RKey(), true))
		require.False(t, mem.InvalidateRKey(nil, mr.RKey(), true))
		require.Nil(t, mem.RemoteRegion(nil, mr.RKey(), a, 8, AccessRemoteWrite))
		require.False(t, v.ReadAt(b[:8], a), "a view taken before the invalidation")
		require.False(t, v.WriteAt(b[:8], a))
		_, ok = v.Atomic(a+96, false, 0, 1)
		require.False(t, ok)
		require.True(t, local.ReadAt(b[:8], a))
	})
	localRO := ibtransport.Region(nil)
	onEngine(func() { localRO = mem.LocalRegion(ro.LKey(), ro.Addr(), 8, 0) })
	require.NoError(t, ro.Dereg())
	onEngine(func() {
		require.Nil(t, mem.LocalRegion(ro.LKey(), ro.Addr(), 8, 0))
		require.False(t, localRO.ReadAt(make([]byte, 8), ro.Addr()), "a view of a deregistered region")
	})
	require.ErrorIs(t, ro.Dereg(), ErrInvalidArgument)
}
