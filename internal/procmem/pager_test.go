package procmem

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The pager finds what is mapped with the rights asked, faults in what it
// did not hold, and forgets nothing it should not report: a mapping made
// after a fault is found by the next fault, and one never made is not.
func TestPager(t *testing.T) {
	p, err := Open(os.Getpid())
	require.NoError(t, err)
	defer p.Close()
	g := NewPager(p, nil)

	rw, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer unix.Munmap(rw)
	base := uint64(uintptr(unsafe.Pointer(&rw[0])))
	require.NoError(t, unix.Mprotect(rw[4096:8192], unix.PROT_READ))

	require.False(t, g.Holds(base, 10, false), "nothing faulted yet")
	require.True(t, g.Mapped(base, 4096, true))
	require.True(t, g.Holds(base, 4096, true))
	require.True(t, g.Mapped(base, 3*4096, false), "read across the read-only page")
	require.False(t, g.Mapped(base, 3*4096, true), "write across it")
	require.True(t, g.Mapped(base+8192, 4096, true))
	require.True(t, g.Mapped(base, 0, true), "no bytes")
	require.False(t, g.Mapped(^uint64(0)-10, 100, false), "wraps around")

	gone, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	at := uint64(uintptr(unsafe.Pointer(&gone[0])))
	require.NoError(t, unix.Munmap(gone))
	require.False(t, g.Mapped(at, 1, false), "unmapped")

	none, err := unix.Mmap(-1, 0, 4096, unix.PROT_NONE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer unix.Munmap(none)
	require.False(t, g.Mapped(uint64(uintptr(unsafe.Pointer(&none[0]))), 1, false), "PROT_NONE")

	g.Forget()
	require.False(t, g.Holds(base, 1, false))
}

// The table stays bounded however many ranges are faulted in.
func TestPagerBounded(t *testing.T) {
	p, err := Open(os.Getpid())
	require.NoError(t, err)
	defer p.Close()
	g := NewPager(p, nil)
	var maps [][]byte
	for i := 0; i < maxPagerRanges+50; i++ {
		// Alternate rights so that neighbours never merge into one range.
		prot := unix.PROT_READ
		if i%2 == 0 {
			prot |= unix.PROT_WRITE
		}
		b, err := unix.Mmap(-1, 0, 4096, prot, unix.MAP_ANON|unix.MAP_PRIVATE)
		require.NoError(t, err)
		maps = append(maps, b)
		require.True(t, g.Mapped(uint64(uintptr(unsafe.Pointer(&b[0]))), 4096, false))
		require.LessOrEqual(t, len(g.ranges), maxPagerRanges)
	}
	for _, b := range maps {
		unix.Munmap(b)
	}
}
