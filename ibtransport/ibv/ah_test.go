package ibv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An AH keeps its address vector and its backend's state, and is
// destroyed once.
func TestAH(t *testing.T) {
	av := AddressVector{DGID: GID{15: 1}, HopLimit: 64}
	state := new(int)
	ah := NewAH(av, state)
	require.Equal(t, av, ah.AV())
	require.Same(t, state, ah.Backend())
	require.False(t, ah.Destroyed())
	require.NoError(t, ah.Destroy())
	require.True(t, ah.Destroyed())
	require.ErrorIs(t, ah.Destroy(), ErrInvalidArgument)
	require.Nil(t, new(AH).Backend(), "the zero AH has no backend")
}
