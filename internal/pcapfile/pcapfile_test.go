package pcapfile

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassicRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	require.NoError(t, err)
	t0 := time.Unix(1700000000, 123456789).UTC()
	frames := [][]byte{{1, 2, 3}, bytes.Repeat([]byte{0xaa}, 1500), {}}
	for i, f := range frames {
		require.NoError(t, w.WritePacket(t0.Add(time.Duration(i)*time.Second), f))
	}
	r, err := NewReader(&buf)
	require.NoError(t, err)
	for i, f := range frames {
		p, err := r.Next()
		require.NoError(t, err)
		assert.Equal(t, f, p.Data)
		assert.Equal(t, len(f), p.OrigLen)
		assert.Equal(t, uint32(LinkTypeEthernet), p.LinkType)
		assert.Equal(t, t0.Add(time.Duration(i)*time.Second), p.Timestamp)
	}
	_, err = r.Next()
	assert.Equal(t, io.EOF, err)
}

func TestTruncatedRecord(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriterSnaplen(&buf, 64)
	require.NoError(t, err)
	frame := bytes.Repeat([]byte{0x5a}, 200)
	require.NoError(t, w.WriteTruncated(time.Unix(1, 2), frame[:64], len(frame)))
	require.Equal(t, uint32(64), binary.LittleEndian.Uint32(buf.Bytes()[16:]), "snap length in the file header")
	r, err := NewReader(&buf)
	require.NoError(t, err)
	p, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, frame[:64], p.Data)
	assert.Equal(t, 200, p.OrigLen)
}

// ngBlock builds a little-endian pcapng block.
func ngBlock(typ uint32, body []byte) []byte {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	b := make([]byte, 8, 12+len(body))
	binary.LittleEndian.PutUint32(b[0:], typ)
	binary.LittleEndian.PutUint32(b[4:], uint32(12+len(body)))
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, uint32(12+len(body)))
}

func TestPcapng(t *testing.T) {
	shb := []byte{0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	idb := []byte{1, 0, 0, 0, 0, 0, 4, 0, // link type 1, snaplen 0x40000
		9, 0, 1, 0, 9, 0, 0, 0, // if_tsresol = 9 (nanoseconds)
		0, 0, 0, 0}
	frame := []byte{0xde, 0xad, 0xbe, 0xef, 0x01}
	ts := uint64(1700000000123456789)
	epb := make([]byte, 20)
	binary.LittleEndian.PutUint32(epb[4:], uint32(ts>>32))
	binary.LittleEndian.PutUint32(epb[8:], uint32(ts))
	binary.LittleEndian.PutUint32(epb[12:], uint32(len(frame)))
	binary.LittleEndian.PutUint32(epb[16:], 60)
	epb = append(epb, frame...)
	var file []byte
	file = append(file, ngBlock(0x0a0d0d0a, shb)...)
	file = append(file, ngBlock(1, idb)...)
	file = append(file, ngBlock(5, []byte{0, 0, 0, 0})...) // statistics: skipped
	file = append(file, ngBlock(6, epb)...)
	r, err := NewReader(bytes.NewReader(file))
	require.NoError(t, err)
	p, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, frame, p.Data)
	assert.Equal(t, 60, p.OrigLen)
	assert.Equal(t, time.Unix(0, int64(ts)).UTC(), p.Timestamp)
	_, err = r.Next()
	assert.Equal(t, io.EOF, err)
}

func TestCorruptInput(t *testing.T) {
	for _, in := range [][]byte{nil, {1, 2}, []byte("not a capture file at all"),
		{0xd4, 0xc3, 0xb2, 0xa1, 2, 0}} {
		_, err := NewReader(bytes.NewReader(in))
		assert.ErrorIs(t, err, ErrFormat)
	}
	// A record claiming 2 GB must not be allocated.
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	_ = w.WritePacket(time.Unix(0, 0), []byte{1})
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[24+8:], 0x7fffffff)
	r, err := NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	_, err = r.Next()
	assert.ErrorIs(t, err, ErrFormat)
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	_ = w.WritePacket(time.Unix(1, 2), []byte{1, 2, 3, 4})
	f.Add(buf.Bytes())
	f.Add(ngBlock(0x0a0d0d0a, []byte{0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
}

// TestCutShort: a file that ends inside a record's header or body ends
// with an error that says so (ErrFormat and io.ErrUnexpectedEOF), after
// the whole records before it.
func TestCutShort(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	require.NoError(t, err)
	require.NoError(t, w.WritePacket(time.Unix(1, 0), []byte{1, 2, 3}))
	require.NoError(t, w.WritePacket(time.Unix(2, 0), bytes.Repeat([]byte{7}, 100)))
	whole := buf.Bytes()
	for _, cut := range []int{len(whole) - 1, len(whole) - 100, len(whole) - 110} {
		r, err := NewReader(bytes.NewReader(whole[:cut]))
		require.NoError(t, err)
		p, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, []byte{1, 2, 3}, p.Data)
		_, err = r.Next()
		require.ErrorIs(t, err, ErrFormat, "cut at %d", cut)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at %d", cut)
	}
}
