package roce

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// The ICRC is a CRC-32 (IEEE) over every frame sent and received, the
// largest computation per packet. hash/crc32 computes it with carry-less
// multiplication (PCLMULQDQ) where the CPU has it, which on hardware is
// several times faster than any table. Under an emulator that translates
// those vector instructions into helper calls (qemu's TCG, which runs
// bench-vm's guests) a table walk is about twice as fast instead. Like
// Linux's RAID6 and XOR code at boot, the package times both once and keeps
// the faster: updateCRC is what ICRC calls.
var updateCRC = fasterCRC(timeCRC(crc32IEEE), timeCRC(crc32Slicing8))

// crc32IEEE is fold256 over the 256-byte blocks of long inputs where the
// CPU has AVX-512's carry-less multiply, then hash/crc32's IEEE update
// (carry-less multiplication where the CPU has it, its own table walk
// otherwise) over the longest multiple of 16 bytes, and slicing-by-8 over
// the rest. hash/crc32 folds 16 bytes
// at a time from 64 bytes on and hands what is left to its table walk,
// which below 16 bytes goes a byte at a time: the 8 tail bytes of a
// 64-byte WRITE's frame (120 bytes covered) cost as much as its 112
// others, and 40-byte ACKs never reach the multiply at all.
func crc32IEEE(crc uint32, p []byte) uint32 {
	if haveFold256 && len(p) >= fold256Min {
		n := len(p) &^ 255
		var rest [16]byte
		fold256(^crc, p[:n], &rest)
		// rest is congruent to the folded bytes with the register in
		// them: its CRC from a zero register, which an update gives from
		// ^0 (it inverts before and after), is theirs. Not through
		// hash/crc32, whose function variables would move rest to the
		// heap.
		crc = crc32Slicing8(^uint32(0), rest[:])
		p = p[n:]
	}
	if len(p) >= clmulMin {
		n := len(p) &^ 15
		crc = crc32.Update(crc, crc32.IEEETable, p[:n])
		p = p[n:]
	}
	return crc32Slicing8(crc, p)
}

// fold256Min is the shortest input fold256 (crc32fold_amd64.s: 256-byte
// blocks, four accumulators) takes over hash/crc32, whose single 512-bit
// accumulator waits for each multiply. Its setup and final folds cost about
// what it saves on a 1 KiB frame; on 4200 bytes (BenchmarkCRC32, best of
// 25 runs on this loaded machine) it took 155 ns to the library's 202.
const fold256Min = 2048

// clmulMin is the shortest input hash/crc32 multiplies rather than walks
// its table over (crc32_amd64.go, crc32_arm64.go: 64 bytes).
const clmulMin = 64

// slicing8 holds the tables of a slicing-by-8 CRC-32 (IEEE): slicing8[k][b]
// is the CRC contribution of byte b followed by k zero bytes.
var slicing8 = makeSlicing8()

func makeSlicing8() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for k := 1; k < 8; k++ {
		for b := range 256 {
			prev := t[k-1][b]
			t[k][b] = prev>>8 ^ t[0][byte(prev)]
		}
	}
	return t
}

// crc32Slicing8 is crc32.Update(crc, crc32.IEEETable, p) eight bytes at a
// time, with scalar loads and table lookups only.
func crc32Slicing8(crc uint32, p []byte) uint32 {
	t := slicing8
	crc = ^crc
	for ; len(p) >= 8; p = p[8:] {
		lo := crc ^ binary.LittleEndian.Uint32(p)
		hi := binary.LittleEndian.Uint32(p[4:])
		crc = t[7][byte(lo)] ^ t[6][byte(lo>>8)] ^ t[5][byte(lo>>16)] ^ t[4][lo>>24] ^
			t[3][byte(hi)] ^ t[2][byte(hi>>8)] ^ t[1][byte(hi>>16)] ^ t[0][hi>>24]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// crcTimingLen is a typical frame's length (IB MTU 1024 and headers).
const crcTimingLen = 1100

// timeCRC returns the best of a few timed runs of update over one frame:
// the least disturbed by interrupts and preemption.
func timeCRC(update func(uint32, []byte) uint32) time.Duration {
	var buf [crcTimingLen]byte
	best := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		for range 8 {
			buf[0] = byte(update(0, buf[:]))
		}
		best = min(best, time.Since(start))
	}
	return best
}

// fasterCRC picks hash/crc32's update unless the table walk took clearly
// less time (under four fifths), so that timing noise on hardware, where
// the library is several times faster, cannot make the wrong choice.
func fasterCRC(library, table time.Duration) func(uint32, []byte) uint32 {
	if table*5 < library*4 {
		return crc32Slicing8
	}
	return crc32IEEE
}
