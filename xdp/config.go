package xdp

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Mode chooses between zero-copy and copy mode.
type Mode int

const (
	// ModeAuto uses zero-copy when the driver offers it, copy mode otherwise.
	ModeAuto Mode = iota
	// ModeCopy forces copy mode (XDP_COPY).
	ModeCopy
	// ModeZeroCopy requires zero-copy (XDP_ZEROCOPY); Open fails without it.
	ModeZeroCopy
)

// Config sizes a socket. Zero fields take the defaults noted.
type Config struct {
	// FrameSize is the UMEM chunk size: a power of two from 2048 to the
	// page size. Default 4096.
	FrameSize int
	// NumFrames is the UMEM size in chunks; half receive, half transmit.
	// Default 4096 (16 MiB with 4 KiB chunks).
	NumFrames int
	// RxRingSize and TxRingSize are the descriptor ring sizes (powers of
	// two). Defaults: the number of receive / transmit frames.
	RxRingSize, TxRingSize int
	// Mode: zero-copy or copy. Default ModeAuto.
	Mode Mode
	// MultiBuffer binds with XDP_USE_SG: frames longer than a chunk arrive
	// and may be sent as several descriptors (Desc.More). Needed when the
	// link MTU exceeds a chunk (less the 256-byte XDP headroom in copy mode).
	MultiBuffer bool
	// Contiguous lays the UMEM out so that a packet longer than a chunk
	// lies in one piece of memory, and the application copies nothing to
	// join or split it. Receive buffers are placed a chunk less the
	// 256-byte headroom apart (unaligned chunk mode), so the kernel's copy
	// of a multi-buffer packet continues where the previous buffer's data
	// ended (see Span). Transmit frames are TxFrameSize bytes, sent as
	// several descriptors (see AppendTx). It implies MultiBuffer and copy
	// mode: zero-copy drivers refuse buffers that cross pages.
	Contiguous bool
	// TxFrameSize is the size of a transmit frame with Contiguous, a
	// multiple of FrameSize. Default FrameSize.
	TxFrameSize int
	// BusyPoll enables preferred busy polling (SO_PREFER_BUSY_POLL) with
	// BusyPollTimeout (default 20µs) and BusyPollBudget (default 64).
	BusyPoll        bool
	BusyPollTimeout time.Duration
	BusyPollBudget  int
}

func (c *Config) setDefaults() error {
	if c.FrameSize == 0 {
		c.FrameSize = 4096
	}
	if c.NumFrames == 0 {
		c.NumFrames = 4096
	}
	page := os.Getpagesize()
	if !isPow2(c.FrameSize) || c.FrameSize < 2048 || c.FrameSize > page {
		return fmt.Errorf("%w: frame size %d is not a power of two between 2048 and the page size %d", ErrConfig, c.FrameSize, page)
	}
	if c.TxFrameSize == 0 {
		c.TxFrameSize = c.FrameSize
	}
	if c.Contiguous {
		if c.Mode == ModeZeroCopy {
			return fmt.Errorf("%w: the contiguous layout needs copy mode", ErrConfig)
		}
		c.Mode = ModeCopy
		c.MultiBuffer = true
		if c.TxFrameSize%c.FrameSize != 0 || c.TxFrameSize > c.NumFrames/4*c.FrameSize {
			return fmt.Errorf("%w: transmit frame size %d is not a multiple of the frame size %d, or over a quarter of the UMEM",
				ErrConfig, c.TxFrameSize, c.FrameSize)
		}
	} else if c.TxFrameSize != c.FrameSize {
		return fmt.Errorf("%w: transmit frame size %d differs from the frame size %d without the contiguous layout",
			ErrConfig, c.TxFrameSize, c.FrameSize)
	}
	if c.NumFrames < 2 || !isPow2(c.NumFrames) {
		return fmt.Errorf("%w: frame count %d is not a power of two of at least 2", ErrConfig, c.NumFrames)
	}
	if uint64(c.NumFrames)*uint64(c.FrameSize) > maxUMEM {
		return fmt.Errorf("%w: UMEM of %d frames of %d bytes exceeds %d bytes: %w", ErrConfig,
			c.NumFrames, c.FrameSize, uint64(maxUMEM), ErrUMEM)
	}
	half := c.NumFrames / 2
	if c.RxRingSize == 0 {
		c.RxRingSize = half
	}
	if c.TxRingSize == 0 {
		c.TxRingSize = half
	}
	if !isPow2(c.RxRingSize) || !isPow2(c.TxRingSize) {
		return fmt.Errorf("%w: ring sizes %d/%d are not powers of two", ErrConfig, c.RxRingSize, c.TxRingSize)
	}
	if c.BusyPollTimeout == 0 {
		c.BusyPollTimeout = 20 * time.Microsecond
	}
	if c.BusyPollBudget == 0 {
		c.BusyPollBudget = 64
	}
	return nil
}

// layout places the receive buffers and transmit frames in the UMEM.
type layout struct {
	rxStride uint64 // distance between receive buffers
	rxCount  int
	txBase   uint64 // where the transmit frames start
	txStride uint64 // transmit frame size
	txCount  int
	txDescs  int // descriptors a transmit frame may need
}

// unalignedOffsetShift is XSK_UNALIGNED_BUF_OFFSET_SHIFT: in unaligned
// chunk mode the kernel reports a buffer as its address plus, in the top
// 16 bits, the offset of the data in it.
const unalignedOffsetShift = 48

func (c *Config) layout() layout {
	l := layout{rxStride: uint64(c.FrameSize), rxCount: c.NumFrames / 2, txStride: uint64(c.TxFrameSize)}
	l.txDescs = c.TxFrameSize / c.FrameSize
	if c.Contiguous {
		l.rxStride -= unix.XDP_PACKET_HEADROOM
		end := uint64(l.rxCount-1)*l.rxStride + uint64(c.FrameSize)
		l.txBase = (end + uint64(c.FrameSize) - 1) &^ uint64(c.FrameSize-1)
	} else {
		l.txBase = uint64(l.rxCount) * l.rxStride
	}
	l.txCount = int((uint64(c.NumFrames*c.FrameSize) - l.txBase) / l.txStride)
	return l
}

// rxIndex returns the receive buffer an address falls in.
func (l *layout) rxIndex(addr uint64) (int, bool) {
	i := addr / l.rxStride
	return int(i), i < uint64(l.rxCount)
}

// txIndex returns the transmit frame an address falls in.
func (l *layout) txIndex(addr uint64) (int, bool) {
	if addr < l.txBase {
		return 0, false
	}
	i := (addr - l.txBase) / l.txStride
	return int(i), i < uint64(l.txCount)
}

func (l *layout) txAddr(i int) uint64 { return l.txBase + uint64(i)*l.txStride }

// maxUMEM bounds the UMEM well below what the kernel can pin (it counts
// pages in 32 bits) so absurd sizes fail early with ErrUMEM.
const maxUMEM = 1 << 40

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
