package roce

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlicing8MatchesLibrary checks the table walk against hash/crc32 for
// every length up to a jumbo frame's and every alignment of the start, from
// random CRC states.
func TestSlicing8MatchesLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9100)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := 0; n <= len(buf)-8; n += 1 + n/64 {
		for off := range 8 {
			p, crc := buf[off:off+n], r.Uint32()
			require.Equal(t, crc32.Update(crc, crc32.IEEETable, p), crc32Slicing8(crc, p), "length %d offset %d", n, off)
		}
	}
}

// TestIEEEMatchesLibrary checks crc32IEEE (fold256 over the 256-byte
// blocks where the CPU has it, the library's multiply over the 16-byte
// ones, slicing-by-8 over the tail) against hash/crc32 alone, for every
// length around each threshold and some beyond, at every alignment.
func TestIEEEMatchesLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 9100) // a jumbo frame: fold256 from 512 bytes on
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := 0; n <= len(buf)-8; n += 1 + n/64 {
		for off := range 8 {
			p, crc := buf[off:off+n], r.Uint32()
			require.Equal(t, crc32.Update(crc, crc32.IEEETable, p), crc32IEEE(crc, p), "length %d offset %d", n, off)
		}
	}
}

// foldConst returns x^e modulo CRC-32's (IEEE) polynomial, bit-reflected
// and shifted left by one, as fold256 multiplies by it.
func foldConst(e int) uint64 {
	const poly = 0x104c11db7 // x^32 + ... + 1, highest power first
	r := uint64(1)
	for range e {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= poly
		}
	}
	var refl uint64
	for i := range 32 {
		refl |= (r >> i & 1) << (31 - i)
	}
	return refl << 1
}

// TestFoldConsts derives fold256's multipliers: x^(D+32) and x^(D-32)
// for folds over D = 2048 and 512 bits in every lane, then over 384, 256
// and 128 bits in lanes 0, 1 and 2, and zeros in lane 3.
func TestFoldConsts(t *testing.T) {
	for reg, dists := range [][4]int{{2048, 2048, 2048, 2048}, {512, 512, 512, 512}, {384, 256, 128, 0}} {
		for lane, d := range dists {
			i := reg*8 + lane*2
			lo, hi := uint64(0), uint64(0)
			if d > 0 {
				lo, hi = foldConst(d+32), foldConst(d-32)
			}
			require.Equal(t, lo, foldConsts[i], "fold over %d bits, lane %d, low", d, lane)
			require.Equal(t, hi, foldConsts[i+1], "fold over %d bits, lane %d, high", d, lane)
		}
	}
}

func FuzzSlicing8(f *testing.F) {
	f.Add(uint32(0), []byte("123456789"))
	f.Add(^uint32(0), make([]byte, 33))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := crc32Slicing8(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("crc32Slicing8(%#x, %x) = %#x, want %#x", crc, p, got, want)
		}
	})
}

// TestFasterCRCPrefersLibrary checks the choice: the table walk only when
// it took under four fifths of the library's time.
func TestFasterCRCPrefersLibrary(t *testing.T) {
	for _, c := range []struct {
		library, table time.Duration
		want           func(uint32, []byte) uint32
	}{
		{library: 75 * time.Nanosecond, table: 700 * time.Nanosecond, want: crc32IEEE},
		{library: 4700 * time.Nanosecond, table: 2500 * time.Nanosecond, want: crc32Slicing8},
		{library: 1000 * time.Nanosecond, table: 850 * time.Nanosecond, want: crc32IEEE},
		{library: 1000 * time.Nanosecond, table: 1000 * time.Nanosecond, want: crc32IEEE},
	} {
		got := fasterCRC(c.library, c.table)
		require.Equal(t, reflect.ValueOf(c.want).Pointer(), reflect.ValueOf(got).Pointer(),
			"library %v, table %v", c.library, c.table)
	}
}

func BenchmarkCRC32(b *testing.B) {
	for _, impl := range []struct {
		name   string
		update func(uint32, []byte) uint32
	}{{"library", crc32IEEE}, {"slicing8", crc32Slicing8}, {"hash-crc32", func(crc uint32, p []byte) uint32 {
		return crc32.Update(crc, crc32.IEEETable, p)
	}}} {
		for _, size := range []int{40, 64, 120, crcTimingLen, 2100, 4200} { // 40: an ACK, 120: a 64-byte WRITE
			p := make([]byte, size)
			b.Run(fmt.Sprintf("%s/%d", impl.name, size), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					p[0] = byte(impl.update(0, p))
				}
			})
		}
	}
}
