package rdmacm

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/verbs"
)

// The QP attributes the connection manager sets, where the exchange does
// not decide them.
const (
	// minRNRTimer is what RTR sets: 0.64 ms, perftest's value; cm.c's
	// default of 0 means 655 ms, which turns one receive not yet posted
	// into a long stall.
	minRNRTimer = 12
	// ackTimeout is the RTS local ACK timeout (4.096 µs × 2^17 = 537 ms)
	// unless the ID's OptionACKTimeout says otherwise: what Linux's
	// rdma_cm gives a RoCE QP (cma.c's packet lifetime of 16 for RoCE,
	// plus one: cm.c's cm_ack_timeout against rxe's ACK delay of 15). A
	// peer that drains a window slower than the timeout (rxe in a slow
	// guest takes tens of ms for 512 KiB) must not see it all sent again:
	// that is a retransmission storm, which ends in retry exceeded.
	ackTimeout = 17
	// defaultRetryCount is used when ConnParam.RetryCount is 0.
	defaultRetryCount = 7
)

// path is what the QP of a connection needs to know of the other side.
type path struct {
	av                 verbs.AddressVector
	mtu                verbs.MTU
	destQPN            uint32
	recvPSN, sendPSN   uint32
	responderResources uint8 // READs and atomics the peer may have outstanding here
	initiatorDepth     uint8 // READs and atomics issued at once
	retryCount         uint8
	rnrRetryCount      uint8
	ackTimeout         uint8
}

// toInit moves a new QP to INIT on port 1, default partition, no remote
// access yet (cma.c: access comes with the connection).
func toInit(qp *verbs.QP) error {
	attr := verbs.QPAttr{State: verbs.QPSInit, Port: 1}
	mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	if err := qp.Modify(&attr, mask); err != nil {
		return fmt.Errorf("QP to INIT: %w", err)
	}
	return nil
}

// access is the remote access a connection along p grants: remote writes
// always, reads and atomics when the peer may issue them, as cm.c's
// ib_cm_init_qp_attr grants them.
func (p *path) access() verbs.Access {
	access := verbs.AccessRemoteWrite
	if p.responderResources > 0 {
		access |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	return access
}

// rtr is what moves a QP of the connection along p to RTR.
func (p *path) rtr() (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{State: verbs.QPSRTR, AccessFlags: p.access(), AV: p.av, PathMTU: p.mtu, DestQPN: p.destQPN,
			RQPSN: header.PSN(p.recvPSN), MaxDestRdAtomic: max(p.responderResources, 1), MinRNRTimer: minRNRTimer},
		verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
			verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
}

// rts is what moves it on to RTS.
func (p *path) rts() (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{State: verbs.QPSRTS, SQPSN: header.PSN(p.sendPSN), Timeout: p.ackTimeout,
			RetryCnt: p.retryCount, RNRRetry: p.rnrRetryCount, MaxRdAtomic: max(p.initiatorDepth, 1)},
		verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
			verbs.QPAttrMaxQPRdAtomic
}

// toRTS connects qp along p: INIT to RTR to RTS.
func toRTS(qp *verbs.QP, p *path) error {
	rtr, mask := p.rtr()
	if err := qp.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	rts, mask := p.rts()
	if err := qp.Modify(&rts, mask); err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// toError moves qp to ERR, flushing its work requests, as the kernel does
// when a connection ends.
func toError(qp *verbs.QP) {
	if qp != nil {
		qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState)
	}
}
