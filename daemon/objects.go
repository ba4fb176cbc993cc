package daemon

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// regMR registers the client's own memory, after checking that it is
// mapped with the rights asked for, in memory whose faults end
// (backing.go; the kernel's EFAULT), and that its pages fit in the
// process's RLIMIT_MEMLOCK (the kernel's ENOMEM).
func (ss *session) regMR(req hostif.RegMRRequest) (any, error) {
	pd := ss.pds[req.PD]
	if pd == nil {
		return nil, fmt.Errorf("PD %d: %w", req.PD, errNoObject)
	}
	access := verbs.Access(req.Access)
	if err := ss.take(resMR, 1); err != nil {
		return nil, err
	}
	mr, pinned, sh, err := ss.place(pd, req.Addr, req.Length, access)
	if err != nil {
		ss.give(resMR, 1)
		return nil, err
	}
	h := ss.handle()
	ss.mrs[h], ss.mrPD[h] = &hostMR{mr: mr, pinned: pinned}, req.PD
	if sh != 0 {
		ss.mrShared[h] = sh
	}
	return hostif.RegMRReply{Handle: h, LKey: mr.LKey(), RKey: mr.RKey()}, nil
}

// hostMR is a session's region and the bytes of pages it counts against
// the process's RLIMIT_MEMLOCK.
type hostMR struct {
	mr     *verbs.MR
	pinned int64
}

// pinnedBytes is what the kernel would pin for [addr, addr+n): the whole
// pages the range touches.
func pinnedBytes(addr, n uint64) int64 {
	if n == 0 {
		return 0
	}
	page := uint64(unix.Getpagesize())
	first, last := addr&^(page-1), (addr+n-1)&^(page-1)
	return int64(last - first + page)
}

// pin counts n more registered bytes against the process's
// RLIMIT_MEMLOCK, read now as the kernel reads it at each registration;
// a process with CAP_IPC_LOCK (root) has no bound.
func (ss *session) pin(n int64) error {
	limit, err := ss.peer.memlock()
	if err != nil {
		return err
	}
	if limit >= 0 && (n > limit || ss.pinned > limit-n) {
		return fmt.Errorf("%d registered bytes and %d more pass RLIMIT_MEMLOCK %d (ulimit -l): %w",
			ss.pinned, n, limit, unix.ENOMEM)
	}
	ss.pinned += n
	return nil
}

// createChannel makes a completion channel: a pipe whose read end the
// client gets and whose write end the daemon keeps (one descriptor of
// the user's).
func (ss *session) createChannel(hostif.Empty) (any, []int, error) {
	if err := ss.take(resDescriptor, 1); err != nil {
		return nil, nil, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		ss.give(resDescriptor, 1)
		return nil, nil, err
	}
	unix.SetNonblock(p[1], true)
	h := ss.handle()
	ss.channels[h] = p[1]
	ss.closeAfterReply = append(ss.closeAfterReply, p[0])
	return hostif.HandleReply{Handle: h}, []int{p[0]}, nil
}

// destroyChannel closes a completion channel no CQ of the session uses.
func (ss *session) destroyChannel(req hostif.HandleRequest) error {
	fd, ok := ss.channels[req.Handle]
	if !ok {
		return fmt.Errorf("channel %d: %w", req.Handle, errNoObject)
	}
	for _, cq := range ss.cqs {
		if cq.channel == req.Handle {
			return errBusy
		}
	}
	delete(ss.channels, req.Handle)
	unix.Close(fd)
	ss.give(resDescriptor, 1)
	return nil
}

func (ss *session) createCQ(req hostif.CreateCQRequest) (any, []int, error) {
	if req.Entries == 0 || req.Entries > verbs.MaxCQE {
		return nil, nil, fmt.Errorf("CQ of %d entries: %w", req.Entries, unix.EINVAL)
	}
	notify := func() {}
	if req.Channel != 0 {
		fd, ok := ss.channels[req.Channel]
		if !ok {
			return nil, nil, fmt.Errorf("channel %d: %w", req.Channel, errNoObject)
		}
		notify = func() { writeHandle(fd, req.UserHandle) }
	}
	if err := ss.take(resCQ, 1); err != nil {
		return nil, nil, err
	}
	depth := hostif.Pow2(int(req.Entries))
	r, err := ss.newRing("cq", hostif.RingSize(depth, hostif.CQEntrySize))
	if err != nil {
		ss.give(resCQ, 1)
		return nil, nil, err
	}
	ring, err := hostif.NewCompletionQueue(r.mem, depth)
	if err != nil {
		ss.freeRing(r)
		ss.give(resCQ, 1)
		return nil, nil, err
	}
	h := ss.handle()
	cq, err := ss.s.dev.CreateSharedCQ(ring, notify)
	if err != nil {
		ss.freeRing(r)
		ss.give(resCQ, 1)
		return nil, nil, err
	}
	ss.cqs[h] = &hostCQ{cq: cq, ring: r, channel: req.Channel}
	ss.s.own(cq, ss, req.UserHandle)
	return hostif.CreateCQReply{Handle: h, Depth: uint32(depth)}, []int{ss.pass(r)}, nil
}

// writeHandle writes a completion event (the CQ's user handle, as
// ibv_get_cq_event reads it) without blocking.
func writeHandle(fd int, handle uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], handle)
	unix.Write(fd, b[:])
}

func (ss *session) createQP(req hostif.CreateQPRequest) (any, []int, error) {
	xrcSend := req.Type == uint32(verbs.QPTypeXRCSend)
	pd, scq, rcq := ss.pds[req.PD], ss.cqs[req.SendCQ], ss.cqs[req.RecvCQ]
	if xrcSend && req.RecvCQ == 0 && req.SRQ == 0 && req.MaxRecvWR == 0 {
		rcq = scq // none: an XRC send QP has a send queue only
	}
	if pd == nil || scq == nil || rcq == nil {
		return nil, nil, fmt.Errorf("PD %d, CQs %d and %d: %w", req.PD, req.SendCQ, req.RecvCQ, errNoObject)
	}
	if req.Type > uint32(verbs.QPTypeRawPacket) && !xrcSend {
		return nil, nil, fmt.Errorf("QP type %d: %w", req.Type, unix.EINVAL)
	}
	raw := req.Type == uint32(verbs.QPTypeRawPacket)
	if raw {
		if err := ss.mayRaw(); err != nil {
			return nil, nil, err
		}
	}
	var srq *hostSRQ
	if req.SRQ != 0 {
		if srq = ss.srqs[req.SRQ]; srq == nil {
			return nil, nil, fmt.Errorf("SRQ %d: %w", req.SRQ, errNoObject)
		}
		req.MaxRecvWR = 0 // the SRQ's receives serve the QP
		if srq.tags > 0 && req.MaxSendWR == 0 {
			// A TM SRQ owns its QPs' send queues (its rendezvous READs
			// go there); the QP's own ring still needs a slot.
			req.MaxSendWR = 1
		}
	}
	if req.MaxSendWR == 0 || (req.MaxRecvWR == 0) != (srq != nil || xrcSend) || req.MaxSendWR > ibv.MaxQPWR || req.MaxRecvWR > ibv.MaxQPWR {
		return nil, nil, fmt.Errorf("QP of %d and %d work requests: %w", req.MaxSendWR, req.MaxRecvWR, unix.EINVAL)
	}
	sDepth, rDepth := hostif.Pow2(int(req.MaxSendWR)), 0
	if srq == nil && !xrcSend {
		rDepth = hostif.Pow2(int(req.MaxRecvWR))
	}
	// At least one SGE each way in the engine, whatever the client asked:
	// the poisoned request of a bad entry carries one.
	cap := verbs.QPCap{MaxSendWR: sDepth, MaxRecvWR: rDepth, MaxSendSGE: max(int(req.MaxSendSGE), 1),
		MaxRecvSGE: max(int(req.MaxRecvSGE), 1), MaxInlineData: int(req.MaxInline)}
	init := verbs.QPInitAttr{SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: cap, Type: verbs.QPType(req.Type)}
	if xrcSend {
		init.RecvCQ, init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE, req.RecvCQ = nil, 0, 0, 0
	}
	if srq != nil {
		init.SRQ = srq.srq
	}
	if err := ss.takeQP(raw); err != nil {
		return nil, nil, err
	}
	qp, err := pd.CreateQP(&init)
	if err != nil {
		ss.giveQP(raw)
		return nil, nil, err
	}
	return ss.serveQP(qp, req, sDepth, rDepth, cap, raw)
}

// serveQP gives the session's new QP qp (counted already: raw says
// how) its rings and handle, and makes create_qp's reply.
func (ss *session) serveQP(qp *verbs.QP, req hostif.CreateQPRequest, sDepth, rDepth int, cap verbs.QPCap,
	raw bool) (any, []int, error) {
	var ahs func(uint32) *ibv.AH
	if qp.Type() == verbs.QPTypeUD {
		ahs = ss.lookupAH
	}
	// The inline room the QP got, at least its SGEs' (as rxe rounds it):
	// the entries hold it and the reply says it.
	cap.MaxInlineData = qp.Cap().MaxInlineData
	q, err := ss.newHostQP(qp, sDepth, rDepth, cap, ahs)
	if err != nil {
		qp.Destroy()
		ss.giveQP(raw)
		return nil, nil, err
	}
	q.handle, q.pd, q.sc, q.rc, q.srq = ss.handle(), req.PD, req.SendCQ, req.RecvCQ, req.SRQ
	ss.qps[q.handle] = q
	ss.s.own(qp, ss, req.UserHandle)
	ss.publishFetchers()
	reply := hostif.CreateQPReply{Handle: q.handle, QPN: qp.QPN(), SQDepth: uint32(sDepth), SQStride: uint32(q.sq.Stride()),
		RQOffset: uint32(hostif.RingSize(sDepth, q.sq.Stride())), RQDepth: uint32(rDepth),
		MaxSendSGE: req.MaxSendSGE, MaxRecvSGE: req.MaxRecvSGE, MaxInline: uint32(cap.MaxInlineData)}
	if q.rq != nil {
		reply.RQStride = uint32(q.rq.Stride())
	}
	return reply, []int{ss.pass(q.ring)}, nil
}

// newHostQP makes the QP's rings: its send queue, then its receive queue
// (none when rDepth is 0: the QP has an SRQ), in one memfd.
func (ss *session) newHostQP(qp *verbs.QP, sDepth, rDepth int, cap verbs.QPCap, ahs func(uint32) *ibv.AH) (*hostQP, error) {
	sStride, rStride := hostif.SendStride(cap.MaxSendSGE, cap.MaxInlineData), hostif.RecvStride(cap.MaxRecvSGE)
	sSize, rSize := hostif.RingSize(sDepth, sStride), 0
	if rDepth > 0 {
		rSize = hostif.RingSize(rDepth, rStride)
	}
	r, err := ss.newRing("qp", sSize+rSize)
	if err != nil {
		return nil, err
	}
	q := &hostQP{qp: qp, ring: r, sdec: hostif.NewSendDecoder(sStride, cap.MaxSendSGE, cap.MaxInlineData, ahs),
		rdec: hostif.NewRecvDecoder(rStride, cap.MaxRecvSGE)}
	if q.sq, err = hostif.NewWorkQueue(r.mem[:sSize], sDepth, sStride); err == nil && rDepth > 0 {
		q.rq, err = hostif.NewWorkQueue(r.mem[sSize:], rDepth, rStride)
	}
	if err != nil {
		ss.freeRing(r)
		return nil, err
	}
	// The client's provider checks the state before it posts, and reads
	// it for ibv_query_qp: the engine keeps it current, moves to ERR too.
	qp.Transport().MirrorState(q.sq.StateWord())
	// A ring's slot is the client's again when its work request is done,
	// not when the engine takes it, so that the QP holds no more than its
	// depth (ibv_post_send fails with ENOMEM beyond it, as on hardware).
	var rqWord *uint32
	if q.rq != nil {
		rqWord = q.rq.RetiredWord()
	}
	q.sqDone, q.rqDone = qp.Transport().MirrorRetired(q.sq.RetiredWord(), rqWord)
	return q, nil
}

// publishFetchers gives the engine the session's QPs and SRQs anew.
func (ss *session) publishFetchers() {
	list := make([]fetcher, 0, len(ss.qps)+len(ss.srqs))
	for _, q := range ss.qps {
		if q.xrcd == 0 {
			list = append(list, q)
		}
	}
	for _, s := range ss.srqs {
		list = append(list, s)
	}
	ss.fetchers.Store(&list)
}

func (ss *session) modifyQP(req hostif.ModifyQPRequest) error {
	q := ss.qps[req.Handle]
	if q == nil {
		return fmt.Errorf("QP %d: %w", req.Handle, errNoObject)
	}
	if err := q.qp.Modify(hostif.QPAttrOf(&req), ibv.QPAttrMask(req.Mask)); err != nil {
		return err
	}
	if q.xrcd != 0 {
		publishState(q) // an opened XRC receive QP's ring has no mirror
	}
	return nil
}

// The destroy commands: each object goes if nothing of the session uses
// it (EBUSY otherwise), as with a kernel driver.

func (ss *session) destroyQPHandle(req hostif.HandleRequest) error {
	if ss.qps[req.Handle] == nil {
		return errNoObject
	}
	if ss.qpFlows(req.Handle) > 0 {
		return fmt.Errorf("destroy QP %d with flows: %w", req.Handle, errBusy) // as the kernel's uverbs
	}
	if err := ss.qps[req.Handle].qp.Busy(); err != nil {
		return err // a work queue of an RSS QP's table
	}
	ss.destroyQP(req.Handle)
	return nil
}

func (ss *session) destroyCQ(req hostif.HandleRequest) error {
	h := req.Handle
	cq := ss.cqs[h]
	if cq == nil {
		return errNoObject
	}
	for _, q := range ss.qps {
		if q.sc == h || q.rc == h {
			return errBusy
		}
	}
	for _, s := range ss.srqs {
		if s.cq == h { // an XRC or TM SRQ's
			return errBusy
		}
	}
	ss.dropCQ(h)
	return nil
}

// dropCQ forgets CQ h and unmaps its ring; no QP of the session uses it.
func (ss *session) dropCQ(h uint32) {
	cq := ss.cqs[h]
	ss.s.disown(cq.cq)
	ss.freeRing(cq.ring)
	delete(ss.cqs, h)
	ss.give(resCQ, 1)
}

func (ss *session) deregMR(req hostif.HandleRequest) error {
	mr := ss.mrs[req.Handle]
	if mr == nil {
		return errNoObject
	}
	if err := mr.mr.Dereg(); err != nil {
		return err
	}
	ss.pinned -= mr.pinned
	ss.give(resMR, 1)
	delete(ss.mrs, req.Handle)
	delete(ss.mrPD, req.Handle)
	if sh, ok := ss.mrShared[req.Handle]; ok {
		ss.shared[sh].mrs--
		delete(ss.mrShared, req.Handle)
	}
	ss.dmMRGone(req.Handle)
	return nil
}

func (ss *session) destroyAH(req hostif.HandleRequest) error {
	ah := (*ss.ahs.Load())[req.Handle]
	if ah == nil {
		return errNoObject
	}
	ss.drainSends()
	ss.publishAHs(req.Handle, nil)
	ss.give(resAH, 1)
	return ah.Destroy()
}

func (ss *session) deallocPD(req hostif.HandleRequest) error {
	h := req.Handle
	if ss.pds[h] == nil {
		return errNoObject
	}
	if ss.pdInUse(h) {
		return errBusy
	}
	delete(ss.pds, h)
	ss.give(resPD, 1)
	return nil
}

// pdInUse reports whether an AH, MR, MW, QP or SRQ of the session is in PD h.
func (ss *session) pdInUse(h uint32) bool {
	for _, pd := range ss.ahPD {
		if pd == h {
			return true
		}
	}
	for mh, pd := range ss.mrPD {
		if pd == h && ss.mrs[mh] != nil {
			return true
		}
	}
	for _, q := range ss.qps {
		if q.pd == h {
			return true
		}
	}
	for _, s := range ss.srqs {
		if s.pd == h {
			return true
		}
	}
	for _, w := range ss.mws {
		if w.pd == h {
			return true
		}
	}
	return false
}

// destroyQP destroys a QP. The verbs QP's destroy runs while every engine
// is between passes (Group.Do): when it returns, a pass of the first
// engine that had the old QP list has ended, the backlog drops gone QPs,
// and no engine takes the QP's work or writes its rings again.
func (ss *session) destroyQP(h uint32) {
	q := ss.qps[h]
	delete(ss.qps, h)
	ss.publishFetchers()
	q.gone.Store(true)
	q.qp.Destroy() // detaches it from its groups
	ss.s.disown(q.qp)
	ss.freeRing(q.ring)
	ss.giveQP(q.qp.Type() == verbs.QPTypeRawPacket)
	ss.give(resMcast, int64(len(q.mcast)))
}

// createAH makes an address handle for UD sends.
func (ss *session) createAH(req hostif.CreateAHRequest) (any, error) {
	pd := ss.pds[req.PD]
	if pd == nil {
		return nil, fmt.Errorf("PD %d: %w", req.PD, errNoObject)
	}
	if err := ss.take(resAH, 1); err != nil {
		return nil, err
	}
	ah, err := pd.CreateAH(&verbs.AddressVector{DGID: req.DGID, SGIDIndex: req.SGIDIndex, FlowLabel: req.FlowLabel,
		HopLimit: req.HopLimit, TrafficClass: req.TrafficClass})
	if err != nil {
		ss.give(resAH, 1)
		return nil, err
	}
	h := ss.handle()
	ss.ahPD[h] = req.PD
	ss.publishAHs(h, ah)
	return hostif.HandleReply{Handle: h}, nil
}

// drainPasses bounds how many engine passes destroy_ah waits for the
// session's posted sends to be taken.
const drainPasses = 4

// drainSends gives the engines a few passes to take what the client
// posted before it destroys an AH, so that sends rung in before the
// destroy find their AH, as on a NIC, which takes the work requests
// with the doorbell (rxe even sends them within ibv_post_send). mckey
// posts its ten datagrams unsignaled, then destroys their AH at once:
// taken after the destroy, the first found no AH and put the QP in
// error, in about one run of three. The posts were published before
// the command came, so a pass that begins after it takes them; a queue
// that stays full (no room in the engine's) is left after drainPasses.
func (ss *session) drainSends() {
	for i := 0; i < drainPasses && ss.sendsPending(); i++ {
		ss.s.betweenPasses()
	}
}

// sendsPending reports whether a UD QP of the session has send entries
// the engine has not yet taken and retired.
func (ss *session) sendsPending() bool {
	for _, q := range ss.qps {
		if q.qp.Type() == verbs.QPTypeUD && q.sq.Producer() != q.sq.Consumer() {
			return true
		}
	}
	return false
}

// publishAHs sets (or with nil removes) the AH of handle h. The engine
// resolves the handles of UD entries (lookupAH) while the session changes
// them, so the table is replaced whole.
func (ss *session) publishAHs(h uint32, ah *verbs.AH) {
	old := *ss.ahs.Load()
	next := make(map[uint32]*verbs.AH, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	if ah == nil {
		delete(next, h)
		delete(ss.ahPD, h)
	} else {
		next[h] = ah
	}
	ss.ahs.Store(&next)
}

// lookupAH resolves a UD entry's AH handle (the engine's goroutine).
func (ss *session) lookupAH(h uint32) *ibv.AH { return (*ss.ahs.Load())[h] }
