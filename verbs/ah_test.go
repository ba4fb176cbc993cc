package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestCreateAHSGIDIndex: a source GID index outside the GID table is an
// invalid argument, whichever layer finds it.
func TestCreateAHSGIDIndex(t *testing.T) { forEachMode(t, testCreateAHSGIDIndex) }

func testCreateAHSGIDIndex(t *testing.T, m mode) {
	_, a, b := udPairMode(t, m, memlink.Config{})
	n := len(a.dev.GIDTable())
	_, err := a.pd.CreateAH(&verbs.AddressVector{DGID: b.gid, SGIDIndex: uint8(n), HopLimit: 64})
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = a.pd.CreateAH(&verbs.AddressVector{DGID: b.gid, SGIDIndex: uint8(n - 1), HopLimit: 64})
	require.NoError(t, err)
}
