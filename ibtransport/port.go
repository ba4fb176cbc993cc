package ibtransport

import (
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// Port is what an Engine sends through: the RoCE device, which knows the
// link, the addresses and the framing.
type Port interface {
	// Path prepares transmission for local QP qpn to av, with IB packets of
	// up to pathMTU bytes of payload. It fails when av cannot be reached or
	// such packets do not fit the link.
	Path(av *ibv.AddressVector, qpn uint32, pathMTU int) (TxPath, error)
	// ActiveMTU is the port's active IB MTU in bytes: the largest message
	// a UD QP sends.
	ActiveMTU() int
}

// TxPath sends the IB packets of one QP. The engine builds each packet in
// place in the buffer Buffer returns; the port wraps it and queues it. A
// packet sent while Engine.ReadsPending is true may still lack its payload:
// the port holds it, and those after it, until it has called
// Engine.SettleReads (lazyread.go).
type TxPath interface {
	// Buffer returns room for one IB packet (BTH through pad, ICRC
	// excluded), or nil when the link has no free buffer now.
	Buffer() []byte
	// Send sends the first n bytes of the buffer last returned.
	Send(n int)
}

// RecvInfo describes where a received IB packet came from.
type RecvInfo struct {
	SGID, DGID ibv.GID
	// DGIDIndex is the index of DGID in the device's GID table.
	DGIDIndex int
	// NetHeader is the packet's network header as received: an IPv4
	// header (20 bytes) or an IPv6 header (40). UD receives copy it into
	// the GRH; it is valid only during the Receive call.
	NetHeader []byte
	// CE reports that the packet arrived marked Congestion Experienced
	// (ECN codepoint 11 in its IP header): the notification point answers
	// with a CNP (cnp.go).
	CE bool
	// Raw marks a whole frame for raw packet QP RawQPN, forwarded from
	// the engine that received it (ReceiveRaw).
	Raw    bool
	RawQPN uint32
}

// inc adds one to a counter that has a single writer at a time: cheaper
// than an atomic add (no locked instruction), still safe to read anywhere.
func inc(c *atomic.Uint64) { c.Store(c.Load() + 1) }

// add adds n to a counter that has a single writer at a time.
func add(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }
