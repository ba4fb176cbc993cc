package ibtransport

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"
)

// Transition rules (IBA table 93, as the kernel's ib_modify_qp_is_ok keeps
// them for RC): the attributes a transition needs and those it allows.
type transition struct {
	required, optional QPAttrMask
}

var transitions = map[[2]QPState]transition{
	{QPSReset, QPSInit}: {0, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
	{QPSInit, QPSInit}:  {0, QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags},
	{QPSInit, QPSRTR}: {QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
		QPAttrPKeyIndex | QPAttrAccessFlags},
	{QPSRTR, QPSRTS}: {QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic,
		QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPSRTS, QPSRTS}: {0, QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPSRTS, QPSSQD}: {0, 0},
	{QPSSQD, QPSRTS}: {0, QPAttrCurState | QPAttrAccessFlags | QPAttrMinRNRTimer},
	{QPSSQD, QPSSQD}: {0, QPAttrAV | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrTimeout |
		QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic | QPAttrMaxDestRdAtomic},
	{QPSSQE, QPSRTS}: {0, QPAttrCurState | QPAttrAccessFlags},
}

// udTransitions are IBA table 93's rules for UD QPs, as the kernel's
// ib_modify_qp_is_ok keeps them: no address vector, destination QP or
// receive PSN, a Q_Key from INIT on.
var udTransitions = map[[2]QPState]transition{
	{QPSReset, QPSInit}: {QPAttrPKeyIndex | QPAttrPort | QPAttrQKey, 0},
	{QPSInit, QPSInit}:  {0, QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
	{QPSInit, QPSRTR}:   {0, QPAttrPKeyIndex | QPAttrQKey},
	{QPSRTR, QPSRTS}:    {QPAttrSQPSN, QPAttrCurState | QPAttrQKey},
	{QPSRTS, QPSRTS}:    {0, QPAttrCurState | QPAttrQKey},
	{QPSRTS, QPSSQD}:    {0, 0},
	{QPSSQD, QPSRTS}:    {0, QPAttrCurState | QPAttrQKey},
	{QPSSQD, QPSSQD}:    {0, QPAttrPKeyIndex | QPAttrQKey},
	{QPSSQE, QPSRTS}:    {0, QPAttrCurState | QPAttrQKey},
}

// Modify changes the QP's attributes and state (ibv_modify_qp). Only the
// attributes in mask are read. A transition the QP state machine does not
// have, a missing required attribute or an out-of-range value is an error
// and changes nothing.
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	var err error
	if g := q.home.Load().g; len(g.engines) > 1 && q.typ != QPTypeUD && mask&QPAttrState != 0 && attr.State == QPSRTR && mask&QPAttrDestQPN != 0 {
		// Connecting: the QP moves to its connection's engine first, so
		// that its path is that engine's.
		err = g.Do(func() error {
			if q.st == QPSInit {
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

func (q *QP) modify(attr *QPAttr, mask QPAttrMask) error {
	q.e.activate(q)
	cur := q.st
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.State
	}
	if mask&QPAttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("current state is %v, not %v: %w", cur, attr.CurState, ErrInvalidArgument)
	}
	if next == QPSReset || next == QPSErr {
		if mask&^(QPAttrState|QPAttrCurState) != 0 {
			return fmt.Errorf("%v to %v takes no attributes: %w", cur, next, ErrInvalidArgument)
		}
		if next == QPSReset {
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
	if next == QPSSQD && cur != QPSSQD {
		q.sqDrained = false
	}
	q.setState(next)
	return nil
}

// checkTransition checks that the state machine of QPs of type typ has the
// transition from cur to next and that mask gives the attributes it needs
// and no others.
func checkTransition(typ QPType, cur, next QPState, mask QPAttrMask) error {
	table := transitions
	switch typ {
	case QPTypeUD:
		table = udTransitions
	case QPTypeUC:
		table = ucTransitions
	}
	tr, ok := table[[2]QPState{cur, next}]
	if !ok {
		return fmt.Errorf("no transition from %v to %v: %w", cur, next, ErrInvalidState)
	}
	given := mask &^ QPAttrState
	if missing := tr.required &^ given; missing != 0 {
		return fmt.Errorf("%v to %v needs attributes %#x: %w", cur, next, uint32(missing), ErrInvalidArgument)
	}
	if extra := given &^ (tr.required | tr.optional); extra != 0 {
		return fmt.Errorf("%v to %v does not take attributes %#x: %w", cur, next, uint32(extra), ErrInvalidArgument)
	}
	return nil
}

// newPath asks the port for the path of a new address vector or path MTU;
// nil when mask changes neither.
func (q *QP) newPath(attr *QPAttr, mask QPAttrMask) (TxPath, error) {
	if mask&(QPAttrAV|QPAttrPathMTU) == 0 {
		return nil, nil
	}
	av := q.attr.AV
	if mask&QPAttrAV != 0 {
		av = attr.AV
	}
	mtu := q.attr.PathMTU
	if mask&QPAttrPathMTU != 0 {
		mtu = attr.PathMTU
	}
	p, err := q.e.port.Path(&av, q.qpn, mtu.Bytes())
	if err != nil {
		return nil, fmt.Errorf("address vector: %w", err)
	}
	return p, nil
}

// attrSetters copy one attribute each, selected by its mask bit.
var attrSetters = [...]struct {
	mask QPAttrMask
	set  func(dst, src *QPAttr)
}{
	{QPAttrAccessFlags, func(d, s *QPAttr) { d.AccessFlags = s.AccessFlags }},
	{QPAttrPKeyIndex, func(d, s *QPAttr) { d.PKeyIndex = s.PKeyIndex }},
	{QPAttrPort, func(d, s *QPAttr) { d.Port = s.Port }},
	{QPAttrAV, func(d, s *QPAttr) { d.AV = s.AV }},
	{QPAttrPathMTU, func(d, s *QPAttr) { d.PathMTU = s.PathMTU }},
	{QPAttrTimeout, func(d, s *QPAttr) { d.Timeout = s.Timeout }},
	{QPAttrRetryCnt, func(d, s *QPAttr) { d.RetryCnt = s.RetryCnt }},
	{QPAttrRNRRetry, func(d, s *QPAttr) { d.RNRRetry = s.RNRRetry }},
	{QPAttrRQPSN, func(d, s *QPAttr) { d.RQPSN = s.RQPSN & header.PSNMask }},
	{QPAttrSQPSN, func(d, s *QPAttr) { d.SQPSN = s.SQPSN & header.PSNMask }},
	{QPAttrMaxQPRdAtomic, func(d, s *QPAttr) { d.MaxRdAtomic = s.MaxRdAtomic }},
	{QPAttrMaxDestRdAtomic, func(d, s *QPAttr) { d.MaxDestRdAtomic = s.MaxDestRdAtomic }},
	{QPAttrMinRNRTimer, func(d, s *QPAttr) { d.MinRNRTimer = s.MinRNRTimer }},
	{QPAttrDestQPN, func(d, s *QPAttr) { d.DestQPN = s.DestQPN }},
	{QPAttrQKey, func(d, s *QPAttr) { d.QKey = s.QKey }},
}

// Merge copies the attributes of src that mask selects into a, as Modify
// records them (the state aside, which Modify moves itself): a QP's
// attributes as ibv_query_qp returns them.
func (a *QPAttr) Merge(src *QPAttr, mask QPAttrMask) {
	for _, s := range attrSetters {
		if mask&s.mask != 0 {
			s.set(a, src)
		}
	}
}

// applyAttr brings the engine's copies of the attributes (path, MTU, PSNs,
// responder resources, retry counts) up to date after Merge.
func (q *QP) applyAttr(path TxPath, mask QPAttrMask) {
	if path != nil {
		q.path = path
		q.mtu = uint32(q.attr.PathMTU.Bytes())
		q.req.window = windowFor(q.mtu)
	}
	q.destQPN = q.attr.DestQPN
	if mask&QPAttrRQPSN != 0 {
		q.resp.ePSN = q.attr.RQPSN
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		q.resp.initResources(int(q.attr.MaxDestRdAtomic))
	}
	if mask&QPAttrSQPSN != 0 {
		q.req.start(q.attr.SQPSN)
		q.comp.start(q.attr.SQPSN)
		q.req.recount()
	}
	q.comp.resetRetries()
}

func validateAttr(a *QPAttr, mask QPAttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("%s %v out of range: %w", what, v, ErrInvalidArgument)
	}
	switch {
	case mask&QPAttrPathMTU != 0 && a.PathMTU.Bytes() == 0:
		return bad("path MTU", a.PathMTU)
	case mask&QPAttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout)
	case mask&QPAttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry count", a.RetryCnt)
	case mask&QPAttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("RNR retry", a.RNRRetry)
	case mask&QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min RNR timer", a.MinRNRTimer)
	case mask&QPAttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomic:
		return bad("max_rd_atomic", a.MaxRdAtomic)
	case mask&QPAttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic:
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	case mask&QPAttrDestQPN != 0 && a.DestQPN > header.PSNMask:
		return bad("dest QPN", a.DestQPN)
	case mask&QPAttrRQPSN != 0 && a.RQPSN > header.PSNMask:
		return bad("RQ PSN", a.RQPSN)
	case mask&QPAttrSQPSN != 0 && a.SQPSN > header.PSNMask:
		return bad("SQ PSN", a.SQPSN)
	case mask&QPAttrPort != 0 && a.Port != 1:
		return bad("port", a.Port)
	case mask&QPAttrAccessFlags != 0 && a.AccessFlags&^AccessAll != 0:
		return bad("access flags", a.AccessFlags)
	}
	return nil
}
