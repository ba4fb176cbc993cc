package daemon

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// hostFlow is a session's flow (create_flow): the verbs flow and the
// handle of its QP.
type hostFlow struct {
	flow *verbs.Flow
	qp   uint32
}

// capNetRaw is CAP_NET_RAW's bit.
const capNetRaw = 13

// errNoNetRaw: a raw packet QP without CAP_NET_RAW.
var errNoNetRaw = errors.New("raw packet QPs need CAP_NET_RAW")

// mayRaw checks that the session's process may create a raw packet QP:
// as the kernel's ib_uverbs_create_qp asks capable(CAP_NET_RAW) of the
// caller at the call, the daemon reads the peer's effective capabilities
// now (peer.status checks after the read that the pid is still the
// peer's, through its pidfd) and asks that the process run in the initial
// user namespace, where alone the capability counts (capable(), not
// ns_capable()). An exec since hello ended the session (watch.go), so
// the process asking is the one that said hello; another process sharing
// the session (sharers.go) gets EACCES, as its capabilities are not the
// session's process's.
func (ss *session) mayRaw() error {
	if ss.byOther {
		return fmt.Errorf("a raw packet QP for another process than the session's (pid %d): %w", ss.peer.pid, unix.EACCES)
	}
	st, err := ss.peer.status("CapEff")
	if err != nil {
		return err
	}
	caps, err := strconv.ParseUint(st["CapEff"], 16, 64)
	if err != nil || caps&(1<<capNetRaw) == 0 || !ss.peer.initialUserNS() {
		return fmt.Errorf("pid %d: %w: %w", ss.peer.pid, errNoNetRaw, unix.EPERM)
	}
	return nil
}

// takeQP counts a new QP against its user's bounds; a raw packet QP
// against RawQPs too.
func (ss *session) takeQP(raw bool) error {
	if err := ss.take(resQP, 1); err != nil {
		return err
	}
	if raw {
		if err := ss.take(resRawQP, 1); err != nil {
			ss.give(resQP, 1)
			return err
		}
	}
	return nil
}

// giveQP gives back what takeQP took.
func (ss *session) giveQP(raw bool) {
	ss.give(resQP, 1)
	if raw {
		ss.give(resRawQP, 1)
	}
}

// createFlow steers frames to one of the session's raw packet QPs
// (ibv_create_flow). The request's specs are checked here (DecodeFlow:
// EINVAL, EOPNOTSUPP for the spec types softnic does not steer on); the
// device bounds its table (ENOMEM), and the flow counts against the
// user's Flows.
func (ss *session) createFlow(req hostif.CreateFlowRequest) (any, error) {
	q := ss.qps[req.QP]
	if q == nil {
		return nil, fmt.Errorf("create flow: QP %d: %w", req.QP, errNoObject)
	}
	attr, err := hostif.DecodeFlow(&req)
	if err != nil {
		return nil, fmt.Errorf("create flow: %w", err)
	}
	if err := ss.take(resFlow, 1); err != nil {
		return nil, err
	}
	f, err := q.qp.CreateFlow(&attr)
	if err != nil {
		ss.give(resFlow, 1)
		return nil, err
	}
	h := ss.handle()
	ss.flows[h] = &hostFlow{flow: f, qp: req.QP}
	return hostif.HandleReply{Handle: h}, nil
}

// destroyFlow removes one of the session's flows (ibv_destroy_flow).
func (ss *session) destroyFlow(req hostif.HandleRequest) error {
	f := ss.flows[req.Handle]
	if f == nil {
		return fmt.Errorf("destroy flow %d: %w", req.Handle, errNoObject)
	}
	if err := f.flow.Destroy(); err != nil {
		return err
	}
	delete(ss.flows, req.Handle)
	ss.give(resFlow, 1)
	return nil
}

// destroyFlows removes every flow of the session, as it ends.
func (ss *session) destroyFlows() {
	for h := range ss.flows {
		ss.destroyFlow(hostif.HandleRequest{Handle: h})
	}
}

// qpFlows counts the session's flows on QP handle h.
func (ss *session) qpFlows(h uint32) int {
	n := 0
	for _, f := range ss.flows {
		if f.qp == h {
			n++
		}
	}
	return n
}

// createRSSQP makes an RSS QP over the session's receive work queues (raw
// packet QPs) (ibv_create_qp_ex with rx_hash_conf): CAP_NET_RAW, as for
// any raw packet QP; a Toeplitz hash only (EOPNOTSUPP for another).
func (ss *session) createRSSQP(req hostif.CreateRSSQPRequest) (any, []int, error) {
	pd, cq := ss.pds[req.PD], ss.cqs[req.CQ]
	if pd == nil || cq == nil {
		return nil, nil, fmt.Errorf("create RSS QP: PD %d, CQ %d: %w", req.PD, req.CQ, errNoObject)
	}
	if req.Function != rxHashToeplitz {
		return nil, nil, fmt.Errorf("create RSS QP: hash function %#x: %w", req.Function, unix.EOPNOTSUPP)
	}
	if req.LogSize > hostif.MaxRSSTableLog {
		return nil, nil, fmt.Errorf("create RSS QP: table of 1<<%d: %w", req.LogSize, unix.EINVAL)
	}
	if err := ss.mayRaw(); err != nil {
		return nil, nil, err
	}
	a := verbs.RSSQPInitAttr{HashKey: req.Key, HashFields: req.Fields, CQ: cq.cq}
	for _, h := range req.Wqs[:1<<req.LogSize] {
		q := ss.qps[h]
		if q == nil {
			return nil, nil, fmt.Errorf("create RSS QP: work queue %d: %w", h, errNoObject)
		}
		a.Table = append(a.Table, q.qp)
	}
	if err := ss.takeQP(true); err != nil {
		return nil, nil, err
	}
	qp, err := pd.CreateRSSQP(&a)
	if err != nil {
		ss.giveQP(true)
		return nil, nil, err
	}
	cap := qp.Cap()
	return ss.serveQP(qp, hostif.CreateQPRequest{PD: req.PD, SendCQ: req.CQ, RecvCQ: req.CQ, UserHandle: req.UserHandle,
		MaxSendSGE: uint32(cap.MaxSendSGE), MaxRecvSGE: uint32(cap.MaxRecvSGE)},
		hostif.Pow2(cap.MaxSendWR), hostif.Pow2(cap.MaxRecvWR), cap, true)
}

// rxHashToeplitz is IBV_RX_HASH_FUNC_TOEPLITZ.
const rxHashToeplitz = 1
