package rping

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFillPing checks the ping data against the lines rping prints: ping
// 0 of 64 bytes starts its letters at 'A', ping 1 at 'B', and the last
// byte is the NUL.
func TestFillPing(t *testing.T) {
	buf := make([]byte, DefaultSize)
	fillPing(buf, 0, 'A')
	assert.Equal(t, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\x00", string(buf))
	fillPing(buf, 1, 'B')
	assert.Equal(t, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs", string(cString(buf)))
	// The letters wrap from 'z' to 'A', within a ping and from one ping's
	// start to the next.
	fillPing(buf[:MinSize], 2147483647, 'y')
	assert.Equal(t, "rdma-ping-2147483647: yzA\x00", string(buf[:MinSize]))
	assert.Equal(t, byte('A'), nextLetter('z'))
	assert.Equal(t, byte('b'), nextLetter('a'))
}

// TestInfoWire checks struct rping_rdma_info's layout: big-endian address,
// rkey and size.
func TestInfoWire(t *testing.T) {
	b := make([]byte, infoLen)
	in := rdmaInfo{addr: 0x0102030405060708, rkey: 0x090a0b0c, size: 0x0d0e0f10}
	in.put(b)
	assert.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, b)
	assert.Equal(t, in, parseInfo(b))
}

func TestCString(t *testing.T) {
	assert.Equal(t, []byte("ab"), cString([]byte("ab\x00cd")))
	assert.Equal(t, []byte("abc"), cString([]byte("abc")))
	assert.Empty(t, cString([]byte{0, 'a'}))
}

// TestCheckSize checks rping's -S range and message: 26 (its
// RPING_MIN_BUFSIZE) to 65535, the message naming 65536.
func TestCheckSize(t *testing.T) {
	assert.Equal(t, 26, MinSize)
	for _, ok := range []int{26, 64, 65535} {
		assert.NoError(t, CheckSize(ok), ok)
	}
	for _, bad := range []int{25, 0, -1, 65536} {
		assert.Error(t, CheckSize(bad), bad)
	}
	assert.EqualError(t, CheckSize(25), "Invalid size 25 (valid range is 26 to 65536)")
	assert.EqualError(t, CheckCount(-2), "Invalid count -2")
	assert.NoError(t, CheckCount(0))
}

func TestExitStatus(t *testing.T) {
	assert.Equal(t, 0, ExitStatus(nil))
	assert.Equal(t, 22, ExitStatus(&Failure{Status: 22}))
	assert.Equal(t, 255, ExitStatus(failed("x")))
	assert.Equal(t, 255, ExitStatus(bytes.ErrTooLarge))
}
