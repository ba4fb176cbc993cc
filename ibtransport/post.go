package ibtransport

import (
	"encoding/binary"
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// PostSend posts a send work request (ibv_post_send). The request's SGL and
// inline data are copied, so wr may be reused when PostSend returns.
func (q *QP) PostSend(wr *ibv.SendWR) error {
	if err := q.checkPostSend(); err != nil {
		return err
	}
	q.sq.mu.Lock()
	err := q.postSendLocked(wr)
	q.sq.mu.Unlock()
	if err != nil {
		return err
	}
	q.home.Load().kick(q)
	return nil
}

// PostSendList posts several send work requests at once, in order, with one
// doorbell (ibv_post_send with a list). It returns how many were posted; on
// an error, wrs[n] is the request that failed (libibverbs' bad_wr).
func (q *QP) PostSendList(wrs []ibv.SendWR) (int, error) {
	if err := q.checkPostSend(); err != nil {
		return 0, err
	}
	q.sq.mu.Lock()
	n := 0
	var err error
	for i := range wrs {
		if err = q.postSendLocked(&wrs[i]); err != nil {
			break
		}
		n++
	}
	q.sq.mu.Unlock()
	if n > 0 {
		q.home.Load().kick(q)
	}
	return n, err
}

// PostSendError posts a work request that completes with status st and
// takes the QP to the error state, as a NIC completes a descriptor it
// cannot execute: the daemon's answer to a client's entry it could not
// decode or post. The completion comes whatever the QP's signaling.
func (q *QP) PostSendError(id uint64, st ibv.WCStatus) error {
	if err := q.checkPostSend(); err != nil {
		return err
	}
	sq := &q.sq
	sq.mu.Lock()
	t, err := q.nextSendSlot()
	if err != nil {
		sq.mu.Unlock()
		return err
	}
	i := t & sq.mask
	sq.slots[i] = sendWQE{id: id, opcode: ibv.WRSend, flags: ibv.SendSignaled, state: wqeError, status: st}
	if sq.ud != nil {
		sq.ud[i] = udDest{}
	}
	sq.tail.Store(t + 1)
	sq.mu.Unlock()
	q.home.Load().kick(q)
	return nil
}

func (q *QP) checkPostSend() error {
	if q.typ == ibv.QPTypeXRCRecv {
		return fmt.Errorf("post send on XRC receive QP %d: it has no send queue: %w", q.qpn, ibv.ErrInvalidArgument)
	}
	switch q.State() {
	case ibv.QPSReset, ibv.QPSInit, ibv.QPSRTR:
		return fmt.Errorf("post send on QP %d: %w (%v)", q.qpn, ibv.ErrInvalidState, q.State())
	}
	return nil
}

// checkSendWR checks wr against the QP's service and limits
// (CheckSendWR), and a UD send's AH against the engine's.
func (q *QP) checkSendWR(wr *ibv.SendWR) error {
	if err := ibv.CheckSendWR(q.typ, ibv.SendLimits{MaxSGE: q.sq.maxSGE, MaxInline: q.sq.maxInline}, wr); err != nil {
		return err
	}
	if q.typ == ibv.QPTypeUD {
		return q.checkUDAH(wr)
	}
	return nil
}

// nextSendSlot returns the send queue's tail, the index of the slot the
// next post fills, or ErrQueueFull; sq.mu is held.
func (q *QP) nextSendSlot() (uint32, error) {
	t := q.sq.tail.Load()
	if t-q.sq.head.Load() >= uint32(len(q.sq.slots)) {
		return 0, fmt.Errorf("post send on QP %d: %w", q.qpn, ibv.ErrQueueFull)
	}
	return t, nil
}

// postSendLocked validates wr and copies it into the next SQ slot; sq.mu is
// held.
func (q *QP) postSendLocked(wr *ibv.SendWR) error {
	if err := q.checkSendWR(wr); err != nil {
		return err
	}
	sq := &q.sq
	t, err := q.nextSendSlot()
	if err != nil {
		return err
	}
	i := t & sq.mask
	s := &sq.slots[i]
	*s = sendWQE{id: wr.ID, remoteAddr: wr.RemoteAddr, rkey: wr.RKey, imm: wr.Imm, opcode: wr.Opcode, flags: wr.Flags &^ sendTMInternal}
	if wr.Opcode == ibv.WRSendWithInv || wr.Opcode == ibv.WRLocalInv {
		s.imm = wr.InvalidateRKey // read back through invalidateRKey
	}
	if q.sigAll {
		s.flags |= ibv.SendSignaled
	}
	var n uint64
	switch {
	case wr.Opcode.IsAtomicWrite():
		n = 8 // the value rides in the slot's operands, not an SGL
	case wr.Opcode.IsFlush():
		n = uint64(wr.FlushLength) // flushes remote bytes, sends none
		s.imm = flushSpec(wr.FlushType, wr.FlushLevel)
	default:
		n = sq.copyData(i, s, wr)
	}
	if sq.ud != nil {
		sq.ud[i] = udDest{ah: pathsOf(wr.AH), qpn: wr.RemoteQPN, qkey: wr.RemoteQKey}
	}
	if wr.Opcode.IsAtomic() || wr.Opcode.IsAtomicWrite() || wr.Opcode == ibv.WRBindMW {
		if sq.atomics == nil {
			sq.atomics = make([]atomicOperands, len(sq.slots))
		}
		sq.atomics[i] = atomicOperands{compareAdd: wr.CompareAdd, swap: wr.Swap}
		if wr.Opcode.IsAtomicWrite() {
			sq.atomics[i] = atomicOperands{compareAdd: binary.NativeEndian.Uint64(wr.AtomicWrite[:])}
		}
	}
	if wr.Opcode == ibv.WRBindMW {
		b := &wr.Bind
		s.remoteAddr, s.rkey, s.imm = b.Addr, b.RKey, b.LKey
		sq.atomics[i] = atomicOperands{compareAdd: b.Length, swap: uint64(b.Access)}
	}
	if q.typ == ibv.QPTypeXRCSend {
		sq.atomics[i].srqn = wr.RemoteSRQN // allocated with the QP
	}
	s.length = uint32(min(n, 1<<32-1))
	s.state = wqeNew
	s.status = ibv.WCSuccess
	if n > 1<<31 {
		s.state = wqeError
		s.status = ibv.WCLocLenErr
	}
	sq.tail.Store(t + 1)
	return nil
}

// copyData copies wr's inline data or SGL into slot i and returns the
// message length.
func (sq *sendQueue) copyData(i uint32, s *sendWQE, wr *ibv.SendWR) uint64 {
	if wr.Flags&ibv.SendInline != 0 {
		if sq.inline == nil {
			sq.inline = make([]byte, len(sq.slots)*sq.maxInline)
		}
		copy(sq.inline[int(i)*sq.maxInline:], wr.InlineData)
		return uint64(len(wr.InlineData))
	}
	var n uint64
	s.nsge = uint16(len(wr.SGL))
	for j, g := range wr.SGL {
		p, _ := sq.sge(i, s, j)
		*p = g
		n += uint64(g.Length)
	}
	return n
}

func (q *QP) checkPostRecv() error {
	if q.typ.IsXRC() {
		return fmt.Errorf("post receive on XRC QP %d: it has no receive queue: %w", q.qpn, ibv.ErrInvalidArgument)
	}
	if q.srq != nil {
		return fmt.Errorf("post receive on QP %d: the QP uses an SRQ: %w", q.qpn, ibv.ErrInvalidArgument)
	}
	if q.State() == ibv.QPSReset {
		return fmt.Errorf("post receive on QP %d: %w (RESET)", q.qpn, ibv.ErrInvalidState)
	}
	return nil
}

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *ibv.RecvWR) error {
	if err := q.checkPostRecv(); err != nil {
		return err
	}
	if err := q.rq.Post(wr); err != nil {
		return fmt.Errorf("QP %d: %w", q.qpn, err)
	}
	q.home.Load().kick(q)
	return nil
}

// PostRecvList posts several receives with one doorbell; it returns how many
// it posted (on an error, wrs[n] failed).
func (q *QP) PostRecvList(wrs []ibv.RecvWR) (int, error) {
	if err := q.checkPostRecv(); err != nil {
		return 0, err
	}
	n, err := q.rq.PostList(wrs)
	if n > 0 {
		q.home.Load().kick(q)
	}
	if err != nil {
		return n, fmt.Errorf("QP %d: %w", q.qpn, err)
	}
	return n, nil
}
