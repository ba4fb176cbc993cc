package roce

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// Microsoft's RSS verification suite: the key and an IPv4 flow's hashes,
// of the addresses alone and with the ports.
func TestToeplitzVectors(t *testing.T) {
	var key [RSSKeyLen]byte
	k, _ := hex.DecodeString("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")
	copy(key[:], k)
	in := []byte{66, 9, 149, 187, 161, 142, 100, 80}
	require.Equal(t, uint32(0x323e8fc2), toeplitz(&key, in))
	in = append(in, 2794>>8, 2794&0xff, 1766>>8, 1766&0xff)
	require.Equal(t, uint32(0x51ccc178), toeplitz(&key, in))
}

// Whatever a frame holds, parsing it for the flows and matching and
// hashing it stay inside it.
func FuzzFlowKey(f *testing.F) {
	f.Add([]byte{1, 0x50, 0x56, 0x19, 0x20, 0xa7, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64, 17})
	f.Add(make([]byte, 60))
	rss := &RSS{QPNs: []uint32{5, 6}, Fields: RSSFields}
	f.Fuzz(func(t *testing.T, b []byte) {
		var k flowKey
		if !parseFlowKey(b, &k) {
			return
		}
		rss.pick(&k)
	})
}
