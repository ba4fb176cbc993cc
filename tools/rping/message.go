package rping

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// infoLen is the size of struct rping_rdma_info, the one message rping
// SENDs: the client's buffer advertisements and the server's go-aheads
// (which are all zero: the server never fills its send buffer).
const infoLen = 16

// rdmaInfo is struct rping_rdma_info: a buffer the peer may read or
// write, all fields big-endian on the wire.
type rdmaInfo struct {
	addr uint64
	rkey uint32
	size uint32
}

func (i rdmaInfo) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], i.addr)
	binary.BigEndian.PutUint32(b[8:12], i.rkey)
	binary.BigEndian.PutUint32(b[12:16], i.size)
}

func parseInfo(b []byte) rdmaInfo {
	return rdmaInfo{addr: binary.BigEndian.Uint64(b[0:8]), rkey: binary.BigEndian.Uint32(b[8:12]),
		size: binary.BigEndian.Uint32(b[12:16])}
}

// The letters of the ping data run from 'A' to 'z' and wrap around.
const (
	firstLetter = 'A'
	lastLetter  = 'z'
)

// nextLetter is the letter after c in the ping data's cycle.
func nextLetter(c byte) byte {
	if c >= lastLetter {
		return firstLetter
	}
	return c + 1
}

// fillPing writes ping number ping's data into buf as rping_test_client
// does: "rdma-ping-N: ", then letters from start on, and a NUL in the last
// byte. buf must hold at least MinSize bytes.
func fillPing(buf []byte, ping int, start byte) {
	var num [20]byte
	n := copy(buf, "rdma-ping-")
	n += copy(buf[n:], strconv.AppendInt(num[:0], int64(ping), 10))
	n += copy(buf[n:], ": ")
	for c := start; n < len(buf); n++ {
		buf[n] = c
		c = nextLetter(c)
	}
	buf[len(buf)-1] = 0
}

// cString returns b up to its first NUL, what printf's %s and strlen see
// of a buffer; all of b when it has none.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
