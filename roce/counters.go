package roce

import (
	"errors"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/header"
)

// RxCounters counts received frames by what became of them. A device keeps
// one set; the fields are atomics so they can be read while packets flow.
// Package counters names them rx_good, rx_bad_icrc, ... (DeviceCounters.Rx).
type RxCounters struct {
	Good         atomic.Uint64 // RoCEv2 frames that parsed, with a good ICRC
	NotRoCE      atomic.Uint64 `rdma:"not_roce"` // frames that were something else
	Truncated    atomic.Uint64
	BadIPHeader  atomic.Uint64
	IPOptions    atomic.Uint64
	Fragments    atomic.Uint64
	BadUDPLength atomic.Uint64
	BadICRC      atomic.Uint64
	// FlushICRCRxe are RC FLUSH frames taken with rdma_rxe's ICRC instead
	// of IBA's (DeviceConfig.RxeFlushICRC); Good counts them too.
	FlushICRCRxe atomic.Uint64
	BadIBHeader  atomic.Uint64 // bad transport version, opcode or pad count
	OtherErrors  atomic.Uint64
}

// Count records the outcome of parsing one frame: err is what ParseFrame or
// header.ParsePacket returned, nil for a good frame.
func (c *RxCounters) Count(err error) {
	switch {
	case err == nil:
		c.Good.Add(1)
	case errors.Is(err, ErrNotRoCE):
		c.NotRoCE.Add(1)
	case errors.Is(err, header.ErrTruncated):
		c.Truncated.Add(1)
	case errors.Is(err, ErrBadIPHeader), errors.Is(err, ErrAddressFamily):
		c.BadIPHeader.Add(1)
	case errors.Is(err, ErrIPOptions):
		c.IPOptions.Add(1)
	case errors.Is(err, ErrFragment):
		c.Fragments.Add(1)
	case errors.Is(err, ErrBadUDPLength):
		c.BadUDPLength.Add(1)
	case errors.Is(err, ErrBadICRC):
		c.BadICRC.Add(1)
	case errors.Is(err, header.ErrBadVersion), errors.Is(err, header.ErrUnknownOpcode),
		errors.Is(err, header.ErrBadPadCount), errors.Is(err, header.ErrUnexpectedPayload):
		c.BadIBHeader.Add(1)
	default:
		c.OtherErrors.Add(1)
	}
}
