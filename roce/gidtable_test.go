package roce_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
)

// TestSetAddrsKeepsIndexes follows addresses as the kernel's GID cache
// does: a removed address empties its entry, the others keep theirs, a
// new one fills the first empty entry, and frames to a removed address
// are no longer the device's.
func TestSetAddrsKeepsIndexes(t *testing.T) {
	la, lb := memlink.Pair(memlink.Config{})
	t.Cleanup(func() { la.Close(); lb.Close() })
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	d, err := roce.NewDevice(la, roce.DeviceConfig{Addrs: []netip.Addr{a("fe80::1"), a("10.93.0.1"), a("fd93::1")}})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })

	ch := d.SetAddrs([]netip.Addr{a("fe80::1"), a("fd93::1")})
	assert.Equal(t, []roce.GIDChange{{Index: 1, Addr: a("10.93.0.1")}}, ch)
	_, err = d.GID(1)
	assert.ErrorIs(t, err, ibv.ErrEmptyGID)
	g, err := d.GID(2)
	require.NoError(t, err)
	assert.Equal(t, roce.GIDFromAddr(a("fd93::1")), g, "a surviving entry keeps its index")
	_, err = d.Path(&ibv.AddressVector{SGIDIndex: 1, DGID: roce.GIDFromAddr(a("10.93.0.2"))}, 5, 1024)
	assert.ErrorIs(t, err, ibv.ErrInvalidArgument, "an emptied entry is no source")

	ch = d.SetAddrs([]netip.Addr{a("fe80::1"), a("fd93::1"), a("10.93.0.7"), a("10.93.0.8")})
	assert.Equal(t, []roce.GIDChange{{Index: 1, Addr: a("10.93.0.7"), Added: true}, {Index: 3, Addr: a("10.93.0.8"), Added: true}}, ch)
	assert.Nil(t, d.SetAddrs([]netip.Addr{a("fe80::1"), a("fd93::1"), a("10.93.0.7"), a("10.93.0.8")}), "no change")

	ch = d.SetAddrs([]netip.Addr{a("fe80::1"), a("fd93::1"), a("10.93.0.7")})
	assert.Equal(t, []roce.GIDChange{{Index: 3, Addr: a("10.93.0.8")}}, ch)
	assert.Equal(t, 16, d.GIDTableLen())
	_, err = d.GID(3)
	assert.ErrorIs(t, err, ibv.ErrEmptyGID)
}
