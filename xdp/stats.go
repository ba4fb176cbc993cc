package xdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Counters are the socket's software counters.
type Counters struct {
	RxPackets, RxDescs, RxBytes uint64
	TxPackets, TxDescs, TxBytes uint64
	TxCompleted                 uint64
	Kicks, KickErrors           uint64 // sendto wakeups of the TX path
	KicksRefused                uint64 // kicks that sent nothing: the driver's queue was full
	KicksHeld                   uint64 // flushes that did not kick a full queue again (Flush)
	RxWakeups                   uint64 // recvfrom wakeups (need_wakeup on fill, busy poll)
	OwnershipErrors             uint64 // frames returned that the caller did not own
}

// counters are updated by the goroutine driving the socket, once per batch
// where possible, and read by Stats from any goroutine.
type counters struct {
	rxPackets, rxDescs, rxBytes    atomic.Uint64
	txPackets, txDescs, txBytes    atomic.Uint64
	txCompleted, kicks, kickErrors atomic.Uint64
	kicksRefused, kicksHeld        atomic.Uint64
	rxWakeups, ownershipErrors     atomic.Uint64
	freeTx, freeRx                 atomic.Int64 // as of the last batch
}

// Stats combines the kernel's ring statistics (XDP_STATISTICS) with the
// socket's counters and the current ring occupancy.
type Stats struct {
	Counters
	RxDropped, RxInvalidDescs, TxInvalidDescs uint64
	RxRingFull, RxFillRingEmpty, TxRingEmpty  uint64
	// Gauges, not counters: package counters leaves them out.
	FillPending, TxPending     uint32 `rdma:"-"` // entries the kernel has not consumed yet
	FreeTxFrames, FreeRxFrames int    `rdma:"-"` // frames waiting on our side, as of the last batch
}

// Stats reads the kernel's ring statistics and adds the socket's counters.
// Unlike the other methods it may be called from any goroutine while the
// socket is in use (but not concurrently with Close).
func (s *Socket) Stats() (Stats, error) {
	c := &s.ctr
	st := Stats{Counters: Counters{
		RxPackets: c.rxPackets.Load(), RxDescs: c.rxDescs.Load(), RxBytes: c.rxBytes.Load(),
		TxPackets: c.txPackets.Load(), TxDescs: c.txDescs.Load(), TxBytes: c.txBytes.Load(),
		TxCompleted: c.txCompleted.Load(), Kicks: c.kicks.Load(), KickErrors: c.kickErrors.Load(), KicksRefused: c.kicksRefused.Load(),
		KicksHeld: c.kicksHeld.Load(),
		RxWakeups: c.rxWakeups.Load(), OwnershipErrors: c.ownershipErrors.Load(),
	}, FreeTxFrames: int(c.freeTx.Load()), FreeRxFrames: int(c.freeRx.Load())}
	if s.closed {
		return st, ErrClosed
	}
	var ks unix.XDPStatistics
	if err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks)); err != nil {
		return st, fmt.Errorf("XDP_STATISTICS: %w", err)
	}
	st.RxDropped, st.RxInvalidDescs, st.TxInvalidDescs = ks.Rx_dropped, ks.Rx_invalid_descs, ks.Tx_invalid_descs
	st.RxRingFull, st.RxFillRingEmpty, st.TxRingEmpty = ks.Rx_ring_full, ks.Rx_fill_ring_empty_descs, ks.Tx_ring_empty_descs
	// Only the shared indexes, never the driving goroutine's caches.
	st.FillPending = s.fill.published()
	st.TxPending = s.tx.published()
	return st, nil
}
