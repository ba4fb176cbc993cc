package roce

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDefaultGID(t *testing.T) {
	// The EUI-64 link-local address Linux gives 52:54:00:12:34:56.
	assert.Equal(t, "fe80::5054:ff:fe12:3456", DefaultGID([6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}).String())
	assert.Equal(t, "fe80::ff:fe00:1", DefaultGID([6]byte{0x02, 0, 0, 0, 0, 1}).String())
}

func TestActiveIBMTU(t *testing.T) {
	for _, c := range []struct{ link, ib int }{
		{9000, 4096}, {4176, 4096}, {4175, 2048}, {1500, 1024}, {1104, 1024}, {1103, 512}, {576, 256}, {68, 256},
	} {
		assert.Equal(t, c.ib, ActiveIBMTU(c.link), "ActiveIBMTU(%d)", c.link)
	}
}
