package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// run executes one command and returns its reply body and descriptors.
func (ss *session) run(op hostif.Op, msg []byte) (any, []int, error) {
	switch op {
	case hostif.OpHello:
		var req hostif.HelloRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return ss.hello(req)
	case hostif.OpAllocPD:
		if err := hostif.DecodeBody(msg, &hostif.Empty{}); err != nil {
			return nil, nil, err
		}
		h := ss.handle()
		ss.pds[h] = ss.s.dev.AllocPD()
		return hostif.HandleReply{Handle: h}, nil, nil
	case hostif.OpRegMR:
		var req hostif.RegMRRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		body, err := ss.regMR(req)
		return body, nil, err
	case hostif.OpCreateCompChannel:
		if err := hostif.DecodeBody(msg, &hostif.Empty{}); err != nil {
			return nil, nil, err
		}
		return ss.createChannel()
	case hostif.OpCreateCQ:
		var req hostif.CreateCQRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return ss.createCQ(req)
	case hostif.OpCreateQP:
		var req hostif.CreateQPRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return ss.createQP(req)
	case hostif.OpModifyQP:
		var req hostif.ModifyQPRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return hostif.Empty{}, nil, ss.modifyQP(req)
	case hostif.OpCreateAH:
		var req hostif.CreateAHRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		body, err := ss.createAH(req)
		return body, nil, err
	case hostif.OpQueryPort:
		if err := hostif.DecodeBody(msg, &hostif.HandleRequest{}); err != nil {
			return nil, nil, err
		}
		return ss.queryPort(), nil, nil
	case hostif.OpQueryGID:
		var req hostif.QueryGIDRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		gid, err := ss.s.dev.GID(int(req.Index))
		if err != nil {
			return nil, nil, fmt.Errorf("GID %d: %w", req.Index, unix.EINVAL)
		}
		return hostif.QueryGIDReply{GID: gid, Type: ibvGIDTypeRoCEv2}, nil, nil
	case hostif.OpCreateSRQ:
		var req hostif.CreateSRQRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return ss.createSRQ(req)
	case hostif.OpModifySRQ:
		var req hostif.ModifySRQRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return hostif.Empty{}, nil, ss.modifySRQ(req)
	case hostif.OpDeallocPD, hostif.OpDeregMR, hostif.OpDestroyCQ, hostif.OpDestroyQP, hostif.OpDestroyAH, hostif.OpDestroySRQ:
		var req hostif.HandleRequest
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return hostif.Empty{}, nil, ss.destroy(op, req.Handle)
	}
	return nil, nil, fmt.Errorf("%w: %v", hostif.ErrMessage, op)
}

// hello starts the session: the device's limits, the session page, the
// async event pipe and the doorbell.
func (ss *session) hello(req hostif.HelloRequest) (any, []int, error) {
	if req.Version != hostif.Version {
		return nil, nil, unix.EPROTONOSUPPORT
	}
	if ss.page != nil {
		return nil, nil, errProto
	}
	page, err := newRing("session", pageSize)
	if err != nil {
		return nil, nil, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		page.close()
		return nil, nil, err
	}
	unix.SetNonblock(p[1], true) // the write end only: a full pipe loses events
	ss.page, ss.async = page, p[1]
	ss.s.mu.Lock()
	ss.s.host.add(ss)
	ss.s.mu.Unlock()
	a := ss.s.dev.Query()
	ss.s.cfg.Log.Info("session started", "pid", ss.proc.Pid())
	ss.closeAfterReply = append(ss.closeAfterReply, p[0])
	return hostif.HelloReply{Version: hostif.Version, MaxQPWR: uint32(a.MaxQPWR), MaxSGE: uint32(a.MaxSGE),
		MaxCQE: uint32(a.MaxCQE), MaxInline: uint32(a.MaxInlineData), MaxRdAtomic: uint32(a.MaxQPRdAtom),
		ActiveMTU: uint32(ss.s.dev.ActiveMTU()), Engines: uint32(ss.s.dev.RoCE().Engines()),
		NodeGUID: ss.s.dev.NodeGUID()}, []int{page.fd, p[0], ss.s.doorbellFD}, nil
}

// ibvGIDTypeRoCEv2 is enum ibv_gid_type's IBV_GID_TYPE_ROCE_V2: every GID
// of a softnic device is a RoCE v2 GID.
const ibvGIDTypeRoCEv2 = 2

// queryPort answers for port 1, the device's only port (the request's
// handle is the port number, which libibverbs checks itself).
func (ss *session) queryPort() hostif.QueryPortReply {
	d := ss.s.dev
	return hostif.QueryPortReply{State: 4, MaxMTU: uint8(verbs.MTU4096), ActiveMTU: uint8(d.ActiveMTU()), LinkLayer: 2,
		GIDTableLen: uint32(len(d.GIDTable())), PKeyTableLen: 1, LinkMTU: uint32(d.RoCE().Link().MTU()),
		MaxMsgSize: uint32(d.Query().MaxMsgSize)}
}
