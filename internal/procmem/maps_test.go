package procmem

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const sampleMaps = `55d0c0a00000-55d0c0a22000 r--p 00000000 fd:01 1234 /usr/bin/x
55d0c0a22000-55d0c0a80000 r-xp 00022000 fd:01 1234 /usr/bin/x
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
7f0000100000-7f0000200000 rw-s 00000000 00:01 99 /memfd:ring (deleted)
7f0000300000-7f0000301000 ---p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`

func TestParseMapsAndCovered(t *testing.T) {
	maps, err := ParseMaps([]byte(sampleMaps))
	require.NoError(t, err)
	require.Len(t, maps, 6)
	require.Equal(t, Mapping{Start: 0x7f0000000000, End: 0x7f0000100000, Readable: true, Write: true}, maps[2])
	require.True(t, maps[2].Anonymous())
	require.Equal(t, Mapping{Start: 0x55d0c0a00000, End: 0x55d0c0a22000, Readable: true, Major: 0xfd, Minor: 1, Inode: 1234}, maps[0])
	require.False(t, maps[0].Anonymous())
	anonymous := func(m Mapping) bool { return m.Anonymous() }
	require.True(t, CoveredBy(maps, 0x7f0000000000, 0x1000, true, anonymous))
	require.False(t, CoveredBy(maps, 0x7f00000ff000, 0x2000, true, anonymous), "into the memfd")
	require.False(t, CoveredBy(maps, 0x55d0c0a00000, 1, false, anonymous), "a file")

	for _, c := range []struct {
		addr, n uint64
		write   bool
		want    bool
	}{
		{0x55d0c0a00000, 0x80000, false, true}, // two mappings back to back
		{0x55d0c0a00000, 0x80000, true, false}, // not writable
		{0x7f00000ff000, 0x2000, true, true},   // across private and shared
		{0x7f00001ff000, 0x2000, false, false}, // into the gap
		{0x7f0000300000, 1, false, false},      // a guard page
		{0x7ffd00020fff, 1, true, true},        // the last byte of the stack
		{0x7ffd00020fff, 2, true, false},       // one past it
		{0x1000, 0, false, true},               // nothing to cover
		{^uint64(0) - 1, 4, false, false},      // wraps
	} {
		require.Equal(t, c.want, Covered(maps, c.addr, c.n, c.write), "%#x+%#x write=%v", c.addr, c.n, c.write)
	}

	for _, bad := range []string{"zz-10 rw-p 0 00:00 0", "10-zz rw-p 0 00:00 0", "20-10 rw-p 0 00:00 0",
		"1000 rw-p 0 00:00 0", "10-20", "10-20 rw-p", "10-20 rw-p 0 0 0", "10-20 rw-p 0 zz:00 0", "10-20 rw-p 0 00:00 x"} {
		_, err := ParseMaps([]byte(bad + "\n"))
		require.Error(t, err, bad)
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte(sampleMaps), uint64(0x7f00000ff000), uint64(0x2000))
	f.Add([]byte("0-ffffffffffffffff rw-p 0 00:00 0\n"), uint64(1), ^uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, addr, n uint64) {
		maps, err := ParseMaps(data)
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End < m.Start {
				t.Fatalf("mapping %+v ends before it starts", m)
			}
		}
		Covered(maps, addr, n, true)
		CoveredBy(maps, addr, n, false, func(m Mapping) bool { return m.Anonymous() })
	})
}
