package header

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte: bits 6:5 say ACK (00), RNR NAK (01) or
// NAK (11); bits 4:0 carry the credit count, the RNR timer code or the NAK
// code. Bit 7 is reserved.
type Syndrome uint8

// SyndromeKind is the class of an AETH syndrome.
type SyndromeKind uint8

// Syndrome kinds.
const (
	SyndromeACK SyndromeKind = iota
	SyndromeRNRNAK
	SyndromeReserved
	SyndromeNAK
)

// UnlimitedCredits is the ACK credit code meaning end-to-end flow control is
// not in use; Linux rxe always sends it.
const UnlimitedCredits = 0x1f

// NAKCode is the reason carried by a NAK.
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError       NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "NAK code " + strconv.Itoa(int(c))
}

// ACKSyndrome returns an ACK syndrome carrying credit code credits (0..31).
func ACKSyndrome(credits uint8) Syndrome { return Syndrome(credits & 0x1f) }

// RNRNAKSyndrome returns a receiver-not-ready NAK with timer code t.
func RNRNAKSyndrome(t RNRTimer) Syndrome { return Syndrome(0x20 | uint8(t)&0x1f) }

// NAKSyndrome returns a NAK with code c.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1f) }

// Kind returns the class of s.
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s>>5) & 3 }

// Credits returns the credit code of an ACK.
func (s Syndrome) Credits() uint8 { return uint8(s) & 0x1f }

// RNRTimer returns the timer code of an RNR NAK.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s & 0x1f) }

// NAKCode returns the code of a NAK.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s & 0x1f) }

func (s Syndrome) String() string {
	switch s.Kind() {
	case SyndromeACK:
		return "ACK credits=" + strconv.Itoa(int(s.Credits()))
	case SyndromeRNRNAK:
		return "RNR NAK timer=" + s.RNRTimer().Duration().String()
	case SyndromeNAK:
		return "NAK " + s.NAKCode().String()
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// RNRTimer is the 5-bit code for the minimum time a requester waits after an
// RNR NAK before retrying (IBA table 45).
type RNRTimer uint8

// rnrMicros is IBA's table of RNR NAK timer values in microseconds; code 0
// means 655.36 ms.
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// Duration returns the wait the timer code stands for.
func (t RNRTimer) Duration() time.Duration {
	return time.Duration(rnrMicros[t&0x1f]) * time.Microsecond
}
