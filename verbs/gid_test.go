package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// A device's GID table is longer than its addresses, as a kernel
// device's: the entries past them are empty (ErrEmptyGID, ibv_query_gid_ex's
// ENODATA), the table ends after them (ErrInvalidArgument), GIDTable gives
// the addresses' entries only, and an empty entry is no source GID.
func TestEmptyGIDEntries(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		n := p.engA.RoCE().GIDTableLen()
		table := p.a.GIDTable()
		require.Len(t, table, 1, "one address")
		require.Greater(t, n, len(table))
		g, err := p.a.GID(0)
		require.NoError(t, err)
		assert.Equal(t, table[0], g)
		for i := len(table); i < n; i++ {
			_, err := p.a.GID(i)
			assert.ErrorIs(t, err, verbs.ErrEmptyGID, "entry %d", i)
		}
		_, err = p.a.GID(n)
		assert.ErrorIs(t, err, verbs.ErrInvalidArgument, "past the table")
		assert.NotErrorIs(t, err, verbs.ErrEmptyGID)

		pd := p.a.AllocPD()
		gidB, err := p.b.GID(0)
		require.NoError(t, err)
		_, err = pd.CreateAH(&verbs.AddressVector{DGID: gidB, SGIDIndex: uint8(len(table)), HopLimit: 64})
		assert.Error(t, err, "an AH from an empty entry")
	})
}
