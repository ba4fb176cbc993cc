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
// the process asking is the one that said hello.
func (ss *session) mayRaw() error {
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
