package pingpong

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPingpongValidation is rc_pingpong's -c check: pages whose first byte
// is not the client's 0 mark are reported.
func TestPingpongValidation(t *testing.T) {
	page := os.Getpagesize()
	buf := bytes.Repeat([]byte{fill}, 3*page+10)
	assert.Len(t, invalidPages(buf), 4, "unmarked buffer: want all 4 pages invalid")
	markPages(buf)
	assert.Empty(t, invalidPages(buf), "marked buffer: want no invalid page")
	buf[2*page] = fill
	assert.Equal(t, []int{2}, invalidPages(buf), "page 2 unmarked")
}
