package session

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// AllocPD allocates a protection domain and returns its handle.
func (c *Conn) AllocPD() (uint32, error) {
	var r hostif.HandleReply
	_, err := c.call(hostif.OpAllocPD, hostif.Empty{}, &r)
	return r.Handle, err
}

// DeallocPD deallocates a protection domain nothing uses any more (EBUSY
// otherwise).
func (c *Conn) DeallocPD(pd uint32) error {
	_, err := c.call(hostif.OpDeallocPD, hostif.HandleRequest{Handle: pd}, &hostif.Empty{})
	return err
}

// MR is a registered region of this process's memory.
type MR struct {
	Handle, LKey, RKey uint32
	Addr               uint64
	Len                int
}

// SGE returns the SGE for n bytes at offset off of the region.
func (m MR) SGE(off, n int) ibv.SGE {
	return ibv.SGE{Addr: m.Addr + uint64(off), Length: uint32(n), LKey: m.LKey}
}

// RegMR registers buf in pd. The daemon reads and writes buf's memory
// directly: keep buf alive (and the Go runtime does not move heap memory).
func (c *Conn) RegMR(pd uint32, buf []byte, access ibv.Access) (MR, error) {
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	var r hostif.RegMRReply
	_, err := c.call(hostif.OpRegMR, hostif.RegMRRequest{PD: pd, Access: uint32(access), Addr: addr, Length: uint64(len(buf))}, &r)
	return MR{Handle: r.Handle, LKey: r.LKey, RKey: r.RKey, Addr: addr, Len: len(buf)}, err
}

// ShareMemory shares mem, this process's MAP_SHARED mapping of memfd fd
// (sealed with F_SEAL_SHRINK), with the daemon: regions registered inside
// it are then reached with plain copies, no system call. fd may be
// closed after; -1 passes none (for tests of the refusal).
func (c *Conn) ShareMemory(mem []byte, fd int) (uint32, error) {
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	var r hostif.HandleReply
	_, err := c.callFD(hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: addr, Length: uint64(len(mem))}, &r, fds...)
	return r.Handle, err
}

// UnshareMemory ends a sharing; the regions inside it must be deregistered
// first (EBUSY).
func (c *Conn) UnshareMemory(handle uint32) error {
	_, err := c.call(hostif.OpUnshareMemory, hostif.HandleRequest{Handle: handle}, &hostif.Empty{})
	return err
}

// Channel is a completion channel: CQ user handles arrive on File.
type Channel struct {
	Handle uint32
	File   *os.File
}

// CreateCompChannel creates a completion channel.
func (c *Conn) CreateCompChannel() (*Channel, error) {
	var r hostif.HandleReply
	fds, err := c.call(hostif.OpCreateCompChannel, hostif.Empty{}, &r)
	if err != nil {
		return nil, err
	}
	fd, err := oneFD(fds, "channel")
	if err != nil {
		return nil, err
	}
	return &Channel{Handle: r.Handle, File: os.NewFile(uintptr(fd), "softnic-channel")}, nil
}

// DestroyCompChannel destroys the daemon's completion channel handle,
// which no CQ may use any more (EBUSY otherwise); the caller closes its
// File.
func (c *Conn) DestroyCompChannel(handle uint32) error {
	_, err := c.call(hostif.OpDestroyCompChannel, hostif.HandleRequest{Handle: handle}, &hostif.Empty{})
	return err
}

// CQ is a completion queue the daemon fills.
type CQ struct {
	Handle uint32
	c      *Conn
	ring   *hostif.CompletionQueue
	mem    []byte
}

// CreateCQ creates a CQ of at least entries completions, notifying ch (if
// not nil) with userHandle when armed.
func (c *Conn) CreateCQ(entries int, ch *Channel, userHandle uint64) (*CQ, error) {
	req := hostif.CreateCQRequest{Entries: uint32(entries), UserHandle: userHandle}
	if ch != nil {
		req.Channel = ch.Handle
	}
	var r hostif.CreateCQReply
	fds, err := c.call(hostif.OpCreateCQ, req, &r)
	if err != nil {
		return nil, err
	}
	mem, err := mapRing(fds, hostif.RingSize(int(r.Depth), hostif.CQEntrySize))
	if err != nil {
		return nil, err
	}
	ring, err := hostif.NewCompletionQueue(mem, int(r.Depth))
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &CQ{Handle: r.Handle, c: c, ring: ring, mem: mem}, nil
}

// oneFD returns the one descriptor a reply for what passed, or closes them
// all and fails.
func oneFD(fds []int, what string) (int, error) {
	if len(fds) != 1 {
		closeAll(fds)
		return -1, fmt.Errorf("%w: %s with %d descriptors", hostif.ErrMessage, what, len(fds))
	}
	return fds[0], nil
}

// mapRing maps the one descriptor a reply passed and closes it.
func mapRing(fds []int, size int) ([]byte, error) {
	fd, err := oneFD(fds, "ring")
	if err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("softnic daemon: map ring: %w", err)
	}
	return mem, nil
}

// Poll moves up to len(wcs) completions into wcs (ibv_poll_cq). Once the
// daemon is gone, an empty ring gives ErrDaemonGone.
func (cq *CQ) Poll(wcs []ibv.WC) (int, error) {
	n := cq.ring.Poll(wcs)
	if n > 0 {
		return n, nil
	}
	if err := cq.c.Err(); err != nil {
		return 0, err
	}
	if cq.ring.Overrun() {
		return 0, fmt.Errorf("softnic daemon: CQ %d overran", cq.Handle)
	}
	return 0, nil
}

// Arm asks for a completion event (ibv_req_notify_cq).
func (cq *CQ) Arm(solicitedOnly bool) { cq.ring.Arm(solicitedOnly) }

// QP is a queue pair the daemon runs.
type QP struct {
	Handle, QPN uint32
	// MaxInline is the inline data the QP takes, as the daemon rounded it
	// (at least 16 bytes for each send SGE, as rxe).
	MaxInline uint32
	c         *Conn
	mem       []byte
	sq, rq    *hostif.WorkQueue
}

// CreateQP creates a QP (ibv_create_qp).
func (c *Conn) CreateQP(req hostif.CreateQPRequest) (*QP, error) {
	return c.createQP(hostif.OpCreateQP, req)
}

// CreateRSSQP creates an RSS QP over receive work queues (create_rss_qp).
func (c *Conn) CreateRSSQP(req hostif.CreateRSSQPRequest) (*QP, error) {
	return c.createQP(hostif.OpCreateRSSQP, req)
}

// createQP sends a command that makes a QP (create_qp, cm_create_qp) and
// maps the rings its reply passes.
func (c *Conn) createQP(op hostif.Op, req any) (*QP, error) {
	var r hostif.CreateQPReply
	fds, err := c.call(op, req, &r)
	if err != nil {
		return nil, err
	}
	size := int(r.RQOffset)
	if r.RQDepth > 0 { // none with an SRQ
		size += hostif.RingSize(int(r.RQDepth), int(r.RQStride))
	}
	mem, err := mapRing(fds, size)
	if err != nil {
		return nil, err
	}
	q := &QP{Handle: r.Handle, QPN: r.QPN, MaxInline: r.MaxInline, c: c, mem: mem}
	if q.sq, err = hostif.NewWorkQueue(mem[:r.RQOffset], int(r.SQDepth), int(r.SQStride)); err == nil && r.RQDepth > 0 {
		q.rq, err = hostif.NewWorkQueue(mem[r.RQOffset:], int(r.RQDepth), int(r.RQStride))
	}
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return q, nil
}

// Modify changes the QP's attributes (ibv_modify_qp).
func (q *QP) Modify(attr *ibv.QPAttr, mask ibv.QPAttrMask) error {
	req := hostif.ModifyQPRequestOf(q.Handle, attr, mask)
	_, err := q.c.call(hostif.OpModifyQP, req, &hostif.Empty{})
	return err
}

// State returns the QP's state as the daemon last published it.
func (q *QP) State() ibv.QPState { return ibv.QPState(q.sq.State()) }

// PostSend posts wr (ibv_post_send): it is encoded into the send queue and
// the doorbell rung, with no system call while the daemon polls.
func (q *QP) PostSend(wr *ibv.SendWR) error { return q.PostSendTo(wr, 0) }

// PostRecv posts wr to the receive queue (ibv_post_recv); a QP with an
// SRQ has none.
func (q *QP) PostRecv(wr *ibv.RecvWR) error {
	if q.rq == nil {
		return fmt.Errorf("softnic daemon: post receive on QP %d: it has an SRQ", q.QPN)
	}
	return postRecv(q.c, q.rq, wr)
}

func postRecv(c *Conn, wq *hostif.WorkQueue, wr *ibv.RecvWR) error {
	if err := c.Err(); err != nil {
		return err
	}
	e, ok := wq.Next()
	if !ok {
		return ErrQueueFull
	}
	if err := hostif.EncodeRecv(e, wr); err != nil {
		return err
	}
	wq.Publish()
	c.ring()
	return nil
}

// Destroy destroys the QP (ibv_destroy_qp).
func (q *QP) Destroy() error {
	_, err := q.c.call(hostif.OpDestroyQP, hostif.HandleRequest{Handle: q.Handle}, &hostif.Empty{})
	if err == nil {
		unix.Munmap(q.mem)
	}
	return err
}

// AttachMcast attaches the QP to multicast group gid (ibv_attach_mcast).
func (q *QP) AttachMcast(gid ibv.GID, lid uint16) error {
	_, err := q.c.call(hostif.OpAttachMcast, hostif.McastRequest{QP: q.Handle, Lid: uint32(lid), GID: gid}, &hostif.Empty{})
	return err
}

// DetachMcast detaches the QP from group gid (ibv_detach_mcast).
func (q *QP) DetachMcast(gid ibv.GID, lid uint16) error {
	_, err := q.c.call(hostif.OpDetachMcast, hostif.McastRequest{QP: q.Handle, Lid: uint32(lid), GID: gid}, &hostif.Empty{})
	return err
}

// PostSendEntry posts a send entry that fill writes, unchecked: for tests
// that play a client that breaks the host interface's rules.
func (q *QP) PostSendEntry(fill func(e []byte)) error {
	if err := q.c.Err(); err != nil {
		return err
	}
	e, ok := q.sq.Next()
	if !ok {
		return ErrQueueFull
	}
	fill(e)
	q.sq.Publish()
	q.c.ring()
	return nil
}

// CreateAH creates an address handle for UD sends to av (ibv_create_ah)
// and returns its handle.
func (c *Conn) CreateAH(pd uint32, av *ibv.AddressVector) (uint32, error) {
	var r hostif.HandleReply
	_, err := c.call(hostif.OpCreateAH, hostif.CreateAHRequest{PD: pd, Port: 1, SGIDIndex: av.SGIDIndex, HopLimit: av.HopLimit,
		TrafficClass: av.TrafficClass, FlowLabel: av.FlowLabel, DGID: av.DGID}, &r)
	return r.Handle, err
}

// DestroyAH destroys an address handle (ibv_destroy_ah).
func (c *Conn) DestroyAH(ah uint32) error {
	_, err := c.call(hostif.OpDestroyAH, hostif.HandleRequest{Handle: ah}, &hostif.Empty{})
	return err
}

// PostSendTo posts a UD send to the address handle ah (PostSend of other
// QPs: ah 0); wr's RemoteQPN and RemoteQKey name the destination QP.
func (q *QP) PostSendTo(wr *ibv.SendWR, ah uint32) error {
	if err := q.c.Err(); err != nil {
		return err
	}
	e, ok := q.sq.Next()
	if !ok {
		return ErrQueueFull
	}
	if err := hostif.EncodeSend(e, wr, ah); err != nil {
		return err
	}
	q.sq.Publish()
	q.c.ring()
	return nil
}

// QueryPort returns the attributes of the device's port (ibv_query_port).
func (c *Conn) QueryPort() (hostif.QueryPortReply, error) {
	var r hostif.QueryPortReply
	_, err := c.call(hostif.OpQueryPort, hostif.HandleRequest{Handle: 1}, &r)
	return r, err
}

// QueryGID returns the GID at index i of the port's table (ibv_query_gid).
func (c *Conn) QueryGID(i int) (ibv.GID, error) {
	var r hostif.QueryGIDReply
	_, err := c.call(hostif.OpQueryGID, hostif.QueryGIDRequest{Index: uint32(i)}, &r)
	switch {
	case errors.Is(err, unix.ENODATA):
		err = fmt.Errorf("GID %d: %w (%w)", i, ibv.ErrEmptyGID, err)
	case errors.Is(err, unix.EINVAL):
		err = fmt.Errorf("GID %d: %w (%w)", i, ibv.ErrInvalidArgument, err)
	}
	return r.GID, err
}

// SRQ is a shared receive queue the daemon's engines take receives from.
type SRQ struct {
	Handle uint32
	c      *Conn
	mem    []byte
	wq     *hostif.WorkQueue
}

// CreateSRQ creates a shared receive queue of at least maxWR receives of
// up to maxSGE SGEs, armed at limit (0: not armed) (ibv_create_srq).
func (c *Conn) CreateSRQ(pd uint32, maxWR, maxSGE, limit int, userHandle uint64) (*SRQ, error) {
	var r hostif.CreateSRQReply
	fds, err := c.call(hostif.OpCreateSRQ, hostif.CreateSRQRequest{PD: pd, MaxWR: uint32(maxWR), MaxSGE: uint32(maxSGE),
		Limit: uint32(limit), UserHandle: userHandle}, &r)
	if err != nil {
		return nil, err
	}
	return c.mapSRQ(r, fds)
}

// CreateTMSRQ creates a tag matching SRQ (create_tm_srq) whose
// completions go to CQ cq, with a list of maxTags tagged buffers.
func (c *Conn) CreateTMSRQ(pd uint32, maxWR, maxSGE int, cq uint32, maxTags, maxOps int, userHandle uint64) (*SRQ, error) {
	var r hostif.CreateSRQReply
	fds, err := c.call(hostif.OpCreateTMSRQ, hostif.CreateTMSRQRequest{PD: pd, MaxWR: uint32(maxWR), MaxSGE: uint32(maxSGE),
		CQ: cq, MaxNumTags: uint32(maxTags), MaxOps: uint32(maxOps), UserHandle: userHandle}, &r)
	if err != nil {
		return nil, err
	}
	return c.mapSRQ(r, fds)
}

// PostOp performs a list operation on a tag matching SRQ (post_srq_op)
// and returns ADD's handle.
func (s *SRQ) PostOp(wr *ibv.OpsWR) (uint32, error) {
	req := hostif.SRQOpRequest{SRQ: s.Handle, Opcode: uint8(wr.Opcode), Flags: uint8(wr.Flags), UnexpectedCnt: wr.UnexpectedCnt,
		Handle: wr.Handle, WRID: wr.ID, RecvWRID: wr.RecvID, Tag: wr.Tag, Mask: wr.Mask, NumSGE: uint8(min(len(wr.SGL), 255))}
	if len(wr.SGL) > 0 {
		req.SGEAddr, req.SGELength, req.SGELKey = wr.SGL[0].Addr, wr.SGL[0].Length, wr.SGL[0].LKey
	}
	var r hostif.HandleReply
	_, err := s.c.call(hostif.OpPostSRQOp, req, &r)
	return r.Handle, err
}

// mapSRQ maps the ring of a created SRQ.
func (c *Conn) mapSRQ(r hostif.CreateSRQReply, fds []int) (*SRQ, error) {
	mem, err := mapRing(fds, hostif.RingSize(int(r.Depth), int(r.Stride)))
	if err != nil {
		return nil, err
	}
	wq, err := hostif.NewWorkQueue(mem, int(r.Depth), int(r.Stride))
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &SRQ{Handle: r.Handle, c: c, mem: mem, wq: wq}, nil
}

// PostRecv posts a receive to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *ibv.RecvWR) error { return postRecv(s.c, s.wq, wr) }

// Modify sets and arms the SRQ's limit (ibv_modify_srq).
func (s *SRQ) Modify(limit int) error {
	_, err := s.c.call(hostif.OpModifySRQ, hostif.ModifySRQRequest{Handle: s.Handle, Limit: uint32(limit)}, &hostif.Empty{})
	return err
}

// Destroy destroys the SRQ (ibv_destroy_srq).
func (s *SRQ) Destroy() error {
	_, err := s.c.call(hostif.OpDestroySRQ, hostif.HandleRequest{Handle: s.Handle}, &hostif.Empty{})
	if err == nil {
		unix.Munmap(s.mem)
	}
	return err
}

// DeregMR deregisters a region (ibv_dereg_mr).
func (c *Conn) DeregMR(mr uint32) error {
	_, err := c.call(hostif.OpDeregMR, hostif.HandleRequest{Handle: mr}, &hostif.Empty{})
	return err
}

// Destroy destroys the CQ once no QP uses it (EBUSY otherwise) and
// unmaps its ring.
func (cq *CQ) Destroy() error {
	_, err := cq.c.call(hostif.OpDestroyCQ, hostif.HandleRequest{Handle: cq.Handle}, &hostif.Empty{})
	if err == nil {
		unix.Munmap(cq.mem)
	}
	return err
}

// Resize moves the CQ to a new ring of at least entries completions
// (resize_cq): the daemon copies the completions not yet polled into it,
// and the new ring goes on at the index the old one had reached. The
// caller polls and arms nothing meanwhile (or does so in the old ring,
// which Follow brings along); Ring returns the new ring after it. If the
// new ring cannot be mapped the CQ is lost: the daemon writes it only.
func (cq *CQ) Resize(entries int) error {
	var r hostif.ResizeCQReply
	fds, err := cq.c.call(hostif.OpResizeCQ, hostif.ResizeCQRequest{Handle: cq.Handle, Entries: uint32(entries)}, &r)
	if err != nil {
		return err
	}
	mem, err := mapRing(fds, hostif.RingSize(int(r.Depth), hostif.CQEntrySize))
	if err != nil {
		return err
	}
	ring, err := hostif.NewCompletionQueue(mem, int(r.Depth))
	if err != nil {
		unix.Munmap(mem)
		return err
	}
	ring.Follow(cq.ring)
	unix.Munmap(cq.mem)
	cq.ring, cq.mem = ring, mem
	return nil
}

// Ring returns the CQ's shared ring, which the caller polls.
func (cq *CQ) Ring() *hostif.CompletionQueue { return cq.ring }

// AllocMW allocates a memory window of type typ (1 or 2) in pd
// (ibv_alloc_mw) and returns its handle and first rkey.
func (c *Conn) AllocMW(pd uint32, typ ibv.MWType) (handle, rkey uint32, err error) {
	var r hostif.AllocMWReply
	_, err = c.call(hostif.OpAllocMW, hostif.AllocMWRequest{PD: pd, Type: uint32(typ)}, &r)
	return r.Handle, r.RKey, err
}

// DeallocMW deallocates a memory window, unbinding it (ibv_dealloc_mw).
func (c *Conn) DeallocMW(mw uint32) error {
	_, err := c.call(hostif.OpDeallocMW, hostif.HandleRequest{Handle: mw}, &hostif.Empty{})
	return err
}

// CreateFlow steers the frames attr matches to the QP, a raw packet QP
// (ibv_create_flow); it returns the flow's handle.
func (q *QP) CreateFlow(attr *ibv.FlowAttr) (uint32, error) {
	req, err := hostif.EncodeFlow(q.Handle, attr)
	if err != nil {
		return 0, err
	}
	return q.c.CreateFlowRequest(req)
}

// CreateFlowRequest sends create_flow with req as it is.
func (c *Conn) CreateFlowRequest(req hostif.CreateFlowRequest) (uint32, error) {
	var r hostif.HandleReply
	_, err := c.call(hostif.OpCreateFlow, req, &r)
	return r.Handle, err
}

// DestroyFlow removes flow h (ibv_destroy_flow).
func (c *Conn) DestroyFlow(h uint32) error {
	_, err := c.call(hostif.OpDestroyFlow, hostif.HandleRequest{Handle: h}, &hostif.Empty{})
	return err
}
