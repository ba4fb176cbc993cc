package roce

import (
	"errors"
	"time"
)

// ErrLinkClosed is returned by Wait and Flush once the link is closed.
var ErrLinkClosed = errors.New("roce: link closed")

// Link moves whole Ethernet frames (without FCS) between a Device and the
// wire. Package xdplink implements it over AF_XDP on a real interface;
// package memlink implements it in memory for tests.
//
// A Link is driven by one goroutine, the device's engine, except Wake, which
// any goroutine may call. Frames are built in place in buffers the link lends
// out, so a packet is copied once: from user memory into the TX buffer.
type Link interface {
	// MTU returns the link's L3 MTU (1500, 9000, ...): the largest IP
	// packet a frame may carry.
	MTU() int
	// TxFrame lends a buffer to build one outgoing frame in. Its length is
	// at least MTU()+22 (Ethernet header, VLAN tag, and slack). It returns
	// nil when no buffer is free; the link calls Wake when one frees up.
	TxFrame() []byte
	// Send queues frame, a prefix of a buffer from TxFrame, for
	// transmission. The buffer goes back to the link.
	Send(frame []byte)
	// Flush pushes the queued frames onto the wire.
	Flush() error
	// Receive calls fn for up to max arrived frames and returns how many
	// it delivered. A frame stays valid after its call until Receive calls
	// fn(nil), which it does before it reuses the buffers of the frames
	// delivered so far, and before it returns if it delivered any: the
	// engine settles its deferred writes of their payloads then.
	Receive(fn func(frame []byte), max int) int
	// Wait blocks until frames may have arrived, a TX buffer freed up, Wake
	// was called, or timeout passed. A negative timeout waits without limit.
	Wait(timeout time.Duration) error
	// Wake makes a current or the next Wait return at once.
	Wake()
	// HardwareAddr returns the link's MAC address.
	HardwareAddr() [6]byte
	// Close releases the link; Wait then returns ErrLinkClosed.
	Close() error
}

// Splitter is a Link over several receive queues that can be divided into
// several Links, so that a Device runs one engine, in its own goroutine,
// on each (an xdplink.Link over a multi-queue interface).
type Splitter interface {
	Link
	// NumQueues returns the number of receive queues.
	NumQueues() int
	// Split divides the queues among n links; each sends on a queue of its
	// own. The whole link must not send or receive afterwards, but Close
	// closes all. It fails with ErrSplit when the queues cannot be divided
	// so.
	Split(n int) ([]Link, error)
}

// CPULink is a Link whose frames arrive by interrupts on a known CPU (an
// xdplink set of queues on a NIC with MSI vectors). The engine that drives
// it runs on that CPU, and an application that polls the device keeps its
// thread there (Device.EngineCPU).
type CPULink interface {
	Link
	// CPU returns the CPU, or -1 when there is none (veth) or it is
	// unknown.
	CPU() int
}

// MTULink is a Link whose MTU may change while it runs (an xdplink
// following its interface): MTU is the current one, at most MaxMTU, the
// largest its frames are sized for, which bounds the path MTUs a QP may
// take; NetdevMTU is its interface's MTU, which may be larger still.
type MTULink interface {
	Link
	MaxMTU() int
	NetdevMTU() int
}

// MaxMTU returns the largest MTU link's frames hold: an MTULink's
// MaxMTU, any other link's MTU.
func MaxMTU(link Link) int {
	if m, ok := link.(MTULink); ok {
		return m.MaxMTU()
	}
	return link.MTU()
}

// NetdevMTU returns the MTU of link's interface: an MTULink's NetdevMTU,
// any other link's MTU.
func NetdevMTU(link Link) int {
	if m, ok := link.(MTULink); ok {
		return m.NetdevMTU()
	}
	return link.MTU()
}

// LinkMTUFor returns the smallest link MTU whose active IB MTU
// (ActiveIBMTU) is ibMTU bytes: 4176 for 4096.
func LinkMTUFor(ibMTU int) int { return ibMTU + maxRoCEHeaders }

// ErrSplit is returned by Split for a number of links the queues cannot
// be divided into.
var ErrSplit = errors.New("cannot split the link's queues so")

// maxRoCEHeaders is what rxe reserves below the link MTU for the headers of
// a RoCEv2 packet (RXE_MAX_HDR_LENGTH) when choosing the active IB MTU.
const maxRoCEHeaders = 80

// ActiveIBMTU returns a port's active IB MTU in bytes (256..4096) on a link
// of MTU linkMTU, chosen like Linux rxe does: the largest IB MTU that fits
// the link MTU less 80 bytes of headers; 1500 gives 1024 and 9000 gives 4096.
func ActiveIBMTU(linkMTU int) int {
	room := linkMTU - maxRoCEHeaders
	for mtu := 4096; mtu > 256; mtu /= 2 {
		if mtu <= room {
			return mtu
		}
	}
	return 256
}

// A DoorbellLink can wait for an eventfd besides its own events: the
// daemon's clients' doorbell (Device.SetHostDoorbell), so that the kernel
// wakes the sleeping engine's thread itself.
type DoorbellLink interface {
	// WaitDoorbell is Wait, which also returns once the eventfd doorbell
	// is readable (ignored if negative), and then reads it: rung.
	WaitDoorbell(doorbell int, timeout time.Duration) (rung bool, err error)
}
