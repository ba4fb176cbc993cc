package rping

import (
	"errors"
	"syscall"

	"github.com/softnic/softnic/verbs"
)

// session is one connection's rping_cb: its verbs objects, its buffers,
// the work requests that use them, and the state its completions drive.
// Only the goroutine running the connection's loop touches it.
type session struct {
	cfg  *Config
	log  *logger
	life *lifetime

	pd *verbs.PD
	cq *verbs.CQ
	qp *verbs.QP

	recvBuf, sendBuf  []byte // one rping_rdma_info each
	rdmaBuf, startBuf []byte // the sink (both sides), the source (client)
	recvMR, sendMR    *verbs.MR
	rdmaMR, startMR   *verbs.MR
	recvSGL, sendSGL  [1]verbs.SGE
	rdmaSGL           [1]verbs.SGE
	recvWR            verbs.RecvWR
	sendWR, rdmaWR    verbs.SendWR
	remote            rdmaInfo // the buffer the peer advertised last
	state             state
	wcs               [cqDepth]verbs.WC
	nwc, iwc          int    // completions in wcs, and the next to handle
	line              []byte // a -v line, built without allocating
	freedBufs         bool
}

func newSession(cfg *Config, log *logger, life *lifetime, st state) *session {
	return &session{cfg: cfg, log: log, life: life, state: st}
}

// createQPFunc creates the connection's RC QP: through the CM, or by hand
// in tests.
type createQPFunc func(pd *verbs.PD, init *verbs.QPInitAttr) (*verbs.QP, error)

// setupQP is rping_setup_qp: a PD, one CQ for both queues, and the QP
// (16 sends, 2 receives, one SGE each), which its creator owns: the CM ID
// destroys it with itself. rping sleeps on a completion channel; this
// waits on the CQ, which needs none.
func (s *session) setupQP(dev *verbs.Device, create createQPFunc) error {
	s.pd = dev.AllocPD()
	s.log.debugf("created pd %p\n", s.pd)
	var err error
	if s.cq, err = dev.CreateCQ(cqDepth, nil); err != nil {
		s.log.errorf("ibv_create_cq failed\n")
		return err
	}
	s.log.debugf("created cq %p\n", s.cq)
	s.qp, err = create(s.pd, &verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Type: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		s.log.errorf("rdma_create_qp: %v\n", err)
		return err
	}
	s.log.debugf("created qp %p\n", s.qp)
	return nil
}

// setupBuffers is rping_setup_buffers: the message buffers, the sink and,
// on the client, the source, registered with rping's access rights, and
// the work requests that use them (rping_setup_wr).
func (s *session) setupBuffers() error {
	s.log.debugf("rping_setup_buffers called on cb %p\n", s)
	const remote = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	var err error
	s.recvBuf, s.sendBuf = make([]byte, infoLen), make([]byte, infoLen)
	if s.recvMR, err = s.pd.RegMR(s.recvBuf, verbs.AccessLocalWrite); err != nil {
		s.log.errorf("recv_buf reg_mr failed\n")
		return err
	}
	if s.sendMR, err = s.pd.RegMR(s.sendBuf, 0); err != nil {
		s.log.errorf("send_buf reg_mr failed\n")
		return err
	}
	s.rdmaBuf = make([]byte, s.cfg.Size)
	if s.rdmaMR, err = s.pd.RegMR(s.rdmaBuf, remote); err != nil {
		s.log.errorf("rdma_buf reg_mr failed\n")
		return err
	}
	if !s.cfg.Server {
		s.startBuf = make([]byte, s.cfg.Size)
		if s.startMR, err = s.pd.RegMR(s.startBuf, remote); err != nil {
			s.log.errorf("start_buf reg_mr failed\n")
			return err
		}
	}
	s.setupWR()
	s.line = make([]byte, 0, len("server ping data: ")+s.cfg.Size+1)
	s.log.debugf("allocated & registered buffers...\n")
	return nil
}

// setupWR is rping_setup_wr: the receive, the SEND of the message buffer,
// and the RDMA request whose opcode, remote buffer and length the server
// sets per ping. All are signaled.
func (s *session) setupWR() {
	s.recvSGL[0] = s.recvMR.SGE(0, infoLen)
	s.recvWR = verbs.RecvWR{SGL: s.recvSGL[:]}
	s.sendSGL[0] = s.sendMR.SGE(0, infoLen)
	s.sendWR = verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: s.sendSGL[:]}
	s.rdmaSGL[0] = s.rdmaMR.SGE(0, 0)
	s.rdmaWR = verbs.SendWR{Flags: verbs.SendSignaled, SGL: s.rdmaSGL[:]}
}

// freeBuffers is rping_free_buffers.
func (s *session) freeBuffers() {
	if s.freedBufs || s.recvMR == nil {
		return
	}
	s.freedBufs = true
	s.log.debugf("rping_free_buffers called on cb %p\n", s)
	for _, mr := range []*verbs.MR{s.recvMR, s.sendMR, s.rdmaMR, s.startMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
}

// postRecv posts the one receive rping keeps posted.
func (s *session) postRecv() error { return s.qp.PostRecv(&s.recvWR) }

// prepare is what rping's client and server do before connecting: the QP
// and its CQ, the buffers, and the first receive; a failure is logged in
// rping's words.
func (s *session) prepare(dev *verbs.Device, create createQPFunc) error {
	if err := s.setupQP(dev, create); err != nil {
		s.log.errorf("setup_qp failed: %d\n", errCode(err))
		return failed(err.Error())
	}
	if err := s.setupBuffers(); err != nil {
		s.log.errorf("rping_setup_buffers failed: %d\n", errCode(err))
		return failed(err.Error())
	}
	if err := s.postRecv(); err != nil {
		s.log.errorf("ibv_post_recv failed: %d\n", errCode(err))
		return failed(err.Error())
	}
	return nil
}

// formatSend is rping_format_send: it advertises mr, of the ping size, in
// the send buffer.
func (s *session) formatSend(mr *verbs.MR) {
	info := rdmaInfo{addr: mr.Addr(), rkey: mr.RKey(), size: uint32(s.cfg.Size)}
	info.put(s.sendBuf)
	if s.log.debug { // boxing the arguments would allocate per ping
		s.log.debugf("RDMA addr %x rkey %x len %d\n", info.addr, info.rkey, info.size)
	}
}

// printData prints a -v line: prefix, then data as printf's %s shows it.
func (s *session) printData(prefix string, data []byte) {
	s.line = append(append(append(s.line[:0], prefix...), cString(data)...), '\n')
	s.cfg.Stdout.Write(s.line)
}

// errCode is the number rping prints for a failed call: the errno when
// there is one, else -1.
func errCode(err error) int {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return int(errno)
	}
	return -1
}
