package xdp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDriverFeaturesString(t *testing.T) {
	f := DriverFeatures{XDP: xdpActBasic | xdpActRedirect | xdpActXSKZeroCopy, ZCMaxSegs: 1}
	assert.True(t, f.ZeroCopy())
	assert.Equal(t, "xdp-features basic,redirect,xsk-zerocopy, xdp-zc-max-segs 1", f.String())
	f.XDP &^= xdpActXSKZeroCopy
	assert.False(t, f.ZeroCopy(), "zero-copy needs xsk-zerocopy")
	assert.Equal(t, "xdp-features none, xdp-zc-max-segs 0", DriverFeatures{}.String())
}

// The loopback device has no XDP driver support: the kernel answers,
// with no zero-copy.
func TestQueryDriverFeaturesLoopback(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	require.NoError(t, err)
	f, err := QueryDriverFeatures(lo.Index)
	require.NoError(t, err)
	assert.False(t, f.ZeroCopy(), "%v", f)
	_, err = QueryDriverFeatures(1 << 30)
	assert.Error(t, err, "no such interface")
}
