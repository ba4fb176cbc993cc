package ibtransport

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// Transition rules (IBA table 93, as the kernel's ib_modify_qp_is_ok keeps
// them for RC): the attributes a transition needs and those it allows.
type transition struct {
	required, optional ibv.QPAttrMask
}

var transitions = map[[2]ibv.QPState]transition{
	{ibv.QPSReset, ibv.QPSInit}: {0, ibv.QPAttrPKeyIndex | ibv.QPAttrPort | ibv.QPAttrAccessFlags},
	{ibv.QPSInit, ibv.QPSInit}:  {0, ibv.QPAttrPKeyIndex | ibv.QPAttrPort | ibv.QPAttrAccessFlags},
	{ibv.QPSInit, ibv.QPSRTR}: {ibv.QPAttrAV | ibv.QPAttrPathMTU | ibv.QPAttrDestQPN | ibv.QPAttrRQPSN | ibv.QPAttrMaxDestRdAtomic | ibv.QPAttrMinRNRTimer,
		ibv.QPAttrPKeyIndex | ibv.QPAttrAccessFlags},
	{ibv.QPSRTR, ibv.QPSRTS}: {ibv.QPAttrSQPSN | ibv.QPAttrTimeout | ibv.QPAttrRetryCnt | ibv.QPAttrRNRRetry | ibv.QPAttrMaxQPRdAtomic,
		ibv.QPAttrCurState | ibv.QPAttrAccessFlags | ibv.QPAttrMinRNRTimer},
	{ibv.QPSRTS, ibv.QPSRTS}: {0, ibv.QPAttrCurState | ibv.QPAttrAccessFlags | ibv.QPAttrMinRNRTimer},
	{ibv.QPSRTS, ibv.QPSSQD}: {0, 0},
	{ibv.QPSSQD, ibv.QPSRTS}: {0, ibv.QPAttrCurState | ibv.QPAttrAccessFlags | ibv.QPAttrMinRNRTimer},
	{ibv.QPSSQD, ibv.QPSSQD}: {0, ibv.QPAttrAV | ibv.QPAttrAccessFlags | ibv.QPAttrPKeyIndex | ibv.QPAttrMinRNRTimer | ibv.QPAttrTimeout |
		ibv.QPAttrRetryCnt | ibv.QPAttrRNRRetry | ibv.QPAttrMaxQPRdAtomic | ibv.QPAttrMaxDestRdAtomic},
	{ibv.QPSSQE, ibv.QPSRTS}: {0, ibv.QPAttrCurState | ibv.QPAttrAccessFlags},
}

// udTransitions are IBA table 93's rules for UD QPs, as the kernel's
// ib_modify_qp_is_ok keeps them: no address vector, destination QP or
// receive PSN, a Q_Key from INIT on.
var udTransitions = map[[2]ibv.QPState]transition{
	{ibv.QPSReset, ibv.QPSInit}: {ibv.QPAttrPKeyIndex | ibv.QPAttrPort | ibv.QPAttrQKey, 0},
	{ibv.QPSInit, ibv.QPSInit}:  {0, ibv.QPAttrPKeyIndex | ibv.QPAttrPort | ibv.QPAttrQKey},
	{ibv.QPSInit, ibv.QPSRTR}:   {0, ibv.QPAttrPKeyIndex | ibv.QPAttrQKey},
	{ibv.QPSRTR, ibv.QPSRTS}:    {ibv.QPAttrSQPSN, ibv.QPAttrCurState | ibv.QPAttrQKey},
	{ibv.QPSRTS, ibv.QPSRTS}:    {0, ibv.QPAttrCurState | ibv.QPAttrQKey},
	{ibv.QPSRTS, ibv.QPSSQD}:    {0, 0},
	{ibv.QPSSQD, ibv.QPSRTS}:    {0, ibv.QPAttrCurState | ibv.QPAttrQKey},
	{ibv.QPSSQD, ibv.QPSSQD}:    {0, ibv.QPAttrPKeyIndex | ibv.QPAttrQKey},
	{ibv.QPSSQE, ibv.QPSRTS}:    {0, ibv.QPAttrCurState | ibv.QPAttrQKey},
}

// Modify changes the QP's attributes and state (ibv_modify_qp). Only the
// attributes in mask are read. A transition the QP state machine does not
// have, a missing required attribute or an out-of-range value is an error
// and changes nothing.
func (q *QP) Modify(attr *ibv.QPAttr, mask ibv.QPAttrMask) error {
	var err error
	if g := q.home.Load().g; len(g.engines) > 1 && q.typ != ibv.QPTypeUD && mask&ibv.QPAttrState != 0 && attr.State == ibv.QPSRTR && mask&ibv.QPAttrDestQPN != 0 {
		// Connecting: the QP moves to its connection's engine first, so
		// that its path is that engine's.
		err = g.Do(func() error {
			if q.st == ibv.QPSInit {
				g.place(q, attr.DestQPN)
			}
			return q.modify(attr, mask)
		})
	} else {
		err = q.do(func() error { return q.modify(attr, mask) })
	}
	if err != nil {
		return fmt.Errorf("modify QP %d: %w", q.qpn, err)
	}
	return nil
}

// do runs fn on the goroutine of the QP's engine.
func (q *QP) do(fn func() error) error {
	for {
		e := q.home.Load()
		moved := false
		err := e.Do(func() error {
			if q.e != e {
				moved = true // placed on another engine meanwhile
				return nil
			}
			return fn()
		})
		if !moved {
			return err
		}
	}
}

func (q *QP) modify(attr *ibv.QPAttr, mask ibv.QPAttrMask) error {
	q.e.activate(q)
	cur := q.st
	next := cur
	if mask&ibv.QPAttrState != 0 {
		next = attr.State
	}
	if mask&ibv.QPAttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("current state is %v, not %v: %w", cur, attr.CurState, ibv.ErrInvalidArgument)
	}
	if next == ibv.QPSReset || next == ibv.QPSErr {
		if mask&^(ibv.QPAttrState|ibv.QPAttrCurState) != 0 {
			return fmt.Errorf("%v to %v takes no attributes: %w", cur, next, ibv.ErrInvalidArgument)
		}
		if next == ibv.QPSReset {
			q.reset()
		} else {
			q.toError()
		}
		return nil
	}
	if err := checkTransition(q.typ, cur, next, mask); err != nil {
		return err
	}
	if err := validateAttr(attr, mask); err != nil {
		return err
	}
	path, err := q.newPath(attr, mask)
	if err != nil {
		return err
	}
	// All checks passed: apply.
	q.attrMu.Lock()
	q.attr.Merge(attr, mask)
	q.attrMu.Unlock()
	q.applyAttr(path, mask)
	if next == ibv.QPSSQD && cur != ibv.QPSSQD {
		q.sqDrained = false
	}
	q.setState(next)
	return nil
}

// checkTransition checks that the state machine of QPs of type typ has the
// transition from cur to next and that mask gives the attributes it needs
// and no others.
func checkTransition(typ ibv.QPType, cur, next ibv.QPState, mask ibv.QPAttrMask) error {
	table := transitions
	switch typ {
	case ibv.QPTypeUD:
		table = udTransitions
	case ibv.QPTypeUC:
		table = ucTransitions
	case ibv.QPTypeRawPacket:
		table = rawTransitions
	case ibv.QPTypeXRCSend:
		table = xrcSendTransitions
	case ibv.QPTypeXRCRecv:
		table = xrcRecvTransitions
	}
	tr, ok := table[[2]ibv.QPState{cur, next}]
	if !ok {
		return fmt.Errorf("no transition from %v to %v: %w", cur, next, ibv.ErrInvalidState)
	}
	given := mask &^ ibv.QPAttrState
	if missing := tr.required &^ given; missing != 0 {
		return fmt.Errorf("%v to %v needs attributes %#x: %w", cur, next, uint32(missing), ibv.ErrInvalidArgument)
	}
	if extra := given &^ (tr.required | tr.optional); extra != 0 {
		return fmt.Errorf("%v to %v does not take attributes %#x: %w", cur, next, uint32(extra), ibv.ErrInvalidArgument)
	}
	return nil
}

// newPath asks the port for the path of a new address vector or path MTU;
// nil when mask changes neither.
func (q *QP) newPath(attr *ibv.QPAttr, mask ibv.QPAttrMask) (TxPath, error) {
	if mask&(ibv.QPAttrAV|ibv.QPAttrPathMTU) == 0 {
		return nil, nil
	}
	av := q.attr.AV
	if mask&ibv.QPAttrAV != 0 {
		av = attr.AV
	}
	mtu := q.attr.PathMTU
	if mask&ibv.QPAttrPathMTU != 0 {
		mtu = attr.PathMTU
	}
	p, err := q.e.port.Path(&av, q.qpn, mtu.Bytes())
	if err != nil {
		return nil, fmt.Errorf("address vector: %w", err)
	}
	return p, nil
}

// applyAttr brings the engine's copies of the attributes (path, MTU, PSNs,
// responder resources, retry counts) up to date after QPAttr.Merge.
func (q *QP) applyAttr(path TxPath, mask ibv.QPAttrMask) {
	if path != nil {
		q.path = path
		q.mtu = uint32(q.attr.PathMTU.Bytes())
		q.req.window = windowFor(q.mtu)
	}
	q.destQPN = q.attr.DestQPN
	if mask&ibv.QPAttrRQPSN != 0 {
		q.resp.ePSN = q.attr.RQPSN
	}
	if mask&ibv.QPAttrMaxDestRdAtomic != 0 {
		q.resp.initResources(int(q.attr.MaxDestRdAtomic))
	}
	if mask&ibv.QPAttrSQPSN != 0 {
		q.req.start(q.attr.SQPSN)
		q.comp.start(q.attr.SQPSN)
		q.req.recount()
	}
	q.comp.resetRetries()
}

func validateAttr(a *ibv.QPAttr, mask ibv.QPAttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("%s %v out of range: %w", what, v, ibv.ErrInvalidArgument)
	}
	switch {
	case mask&ibv.QPAttrPathMTU != 0 && a.PathMTU.Bytes() == 0:
		return bad("path MTU", a.PathMTU)
	case mask&ibv.QPAttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout)
	case mask&ibv.QPAttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry count", a.RetryCnt)
	case mask&ibv.QPAttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("RNR retry", a.RNRRetry)
	case mask&ibv.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min RNR timer", a.MinRNRTimer)
	case mask&ibv.QPAttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > ibv.MaxRdAtomic:
		return bad("max_rd_atomic", a.MaxRdAtomic)
	case mask&ibv.QPAttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > ibv.MaxRdAtomic:
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	case mask&ibv.QPAttrDestQPN != 0 && a.DestQPN > header.PSNMask:
		return bad("dest QPN", a.DestQPN)
	case mask&ibv.QPAttrRQPSN != 0 && a.RQPSN > header.PSNMask:
		return bad("RQ PSN", a.RQPSN)
	case mask&ibv.QPAttrSQPSN != 0 && a.SQPSN > header.PSNMask:
		return bad("SQ PSN", a.SQPSN)
	case mask&ibv.QPAttrPort != 0 && a.Port != 1:
		return bad("port", a.Port)
	case mask&ibv.QPAttrAccessFlags != 0 && a.AccessFlags&^(ibv.AccessAll|ibv.AccessOnDemand|ibv.AccessFlushPersistent) != 0:
		// IBV_ACCESS_ON_DEMAND is a region's flag, which programs also
		// put in a QP's (rdma-core's OdpRdmaRC): the kernel ignores it. A
		// QP may allow persistent FLUSHes (the kernel checks nothing
		// there); no region grants them, so they are NAKed.
		return bad("access flags", a.AccessFlags)
	}
	return nil
}
