package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/internal/procmem"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// handler runs one command on its decoded body and returns the reply's
// body and descriptors.
type handler func(ss *session, msg []byte) (any, []int, error)

// handlers are the commands by op.
var handlers = map[hostif.Op]handler{
	hostif.OpHello:              with((*session).hello),
	hostif.OpAllocPD:            with((*session).allocPD),
	hostif.OpRegMR:              with(noFDs((*session).regMR)),
	hostif.OpCreateCompChannel:  with((*session).createChannel),
	hostif.OpCreateCQ:           with((*session).createCQ),
	hostif.OpCreateQP:           with((*session).createQP),
	hostif.OpModifyQP:           with(noReply((*session).modifyQP)),
	hostif.OpCreateAH:           with(noFDs((*session).createAH)),
	hostif.OpQueryPort:          with((*session).queryPort),
	hostif.OpQueryGID:           with((*session).queryGID),
	hostif.OpCreateSRQ:          with((*session).createSRQ),
	hostif.OpCreateTMSRQ:        with((*session).createTMSRQ),
	hostif.OpPostSRQOp:          with(noFDs((*session).postSRQOp)),
	hostif.OpModifySRQ:          with(noReply((*session).modifySRQ)),
	hostif.OpDeallocPD:          with(noReply((*session).deallocPD)),
	hostif.OpDeregMR:            with(noReply((*session).deregMR)),
	hostif.OpAdviseMR:           with(noReply((*session).adviseMR)),
	hostif.OpReregMR:            with(noFDs((*session).reregMR)),
	hostif.OpDestroyCQ:          with(noReply((*session).destroyCQ)),
	hostif.OpResizeCQ:           with((*session).resizeCQ),
	hostif.OpDestroyQP:          with(noReply((*session).destroyQPHandle)),
	hostif.OpDestroyAH:          with(noReply((*session).destroyAH)),
	hostif.OpDestroySRQ:         with(noReply((*session).destroySRQHandle)),
	hostif.OpQueryResources:     with((*session).queryResources),
	hostif.OpQueryCounters:      with((*session).queryCounters),
	hostif.OpQueryCMIDs:         with((*session).queryCMIDs),
	hostif.OpShareMemory:        with(noFDs((*session).shareMemory)),
	hostif.OpUnshareMemory:      with(noReply((*session).unshareMemory)),
	hostif.OpDestroyCompChannel: with(noReply((*session).destroyChannel)),
	// Device memory (dm.go).
	hostif.OpAllocDM: with((*session).allocDM),
	hostif.OpFreeDM:  with(noReply((*session).freeDM)),
	hostif.OpRegDMMR: with(noFDs((*session).regDMMR)),
	// Importing objects (import.go).
	hostif.OpQueryPD:     with(noReply((*session).queryPD)),
	hostif.OpQueryMR:     with(noFDs((*session).queryMR)),
	hostif.OpQueryDM:     with((*session).queryDM),
	hostif.OpAllocMW:     with(noFDs((*session).allocMW)),
	hostif.OpDeallocMW:   with(noReply((*session).deallocMW)),
	hostif.OpAttachMcast: with(noReply((*session).attachMcast)),
	hostif.OpDetachMcast: with(noReply((*session).detachMcast)),
	// Flows of raw packet QPs (flow.go).
	hostif.OpCreateFlow:  with(noFDs((*session).createFlow)),
	hostif.OpDestroyFlow: with(noReply((*session).destroyFlow)),
	hostif.OpCreateRSSQP: with((*session).createRSSQP),
	// XRC (xrc.go).
	hostif.OpOpenXRCD:     with((*session).openXRCD),
	hostif.OpCloseXRCD:    with(noReply((*session).closeXRCD)),
	hostif.OpCreateXRCSRQ: with((*session).createXRCSRQ),
	hostif.OpCreateXRCQP:  with((*session).createXRCQP),
	hostif.OpOpenQP:       with((*session).openQP),
	// The connection manager (cm.go).
	hostif.OpCMCreateChannel:  withCM((*session).cmCreateChannel),
	hostif.OpCMCreateID:       withCM((*session).cmCreateID),
	hostif.OpCMBind:           withCM((*session).cmBind),
	hostif.OpCMResolveAddr:    withCM((*session).cmResolveAddr),
	hostif.OpCMResolveRoute:   withCM((*session).cmResolveRoute),
	hostif.OpCMCreateQP:       withCM((*session).cmCreateQP),
	hostif.OpCMDetachQP:       withCM((*session).cmDetachQP),
	hostif.OpCMSetOption:      withCM((*session).cmSetOption),
	hostif.OpCMMigrateID:      withCM((*session).cmMigrateID),
	hostif.OpCMInitQPAttr:     withCM((*session).cmInitQPAttr),
	hostif.OpCMEstablish:      withCM((*session).cmEstablish),
	hostif.OpCMConnect:        withCM((*session).cmConnect),
	hostif.OpCMListen:         withCM((*session).cmListen),
	hostif.OpCMAccept:         withCM((*session).cmAccept),
	hostif.OpCMReject:         withCM((*session).cmReject),
	hostif.OpCMDisconnect:     withCM((*session).cmDisconnect),
	hostif.OpCMDestroyID:      withCM((*session).cmDestroyID),
	hostif.OpCMGetEvent:       withCM((*session).cmGetEvent),
	hostif.OpCMQueryAddr:      withCM((*session).cmQueryAddr),
	hostif.OpCMDestroyChannel: withCM((*session).cmDestroyChannel),
	hostif.OpCMJoinMcast:      withCM((*session).cmJoinMcast),
	hostif.OpCMLeaveMcast:     withCM((*session).cmLeaveMcast),
}

// with decodes the body of type T a command takes before running it.
func with[T any](fn func(*session, T) (any, []int, error)) handler {
	return func(ss *session, msg []byte) (any, []int, error) {
		var req T
		if err := hostif.DecodeBody(msg, &req); err != nil {
			return nil, nil, err
		}
		return fn(ss, req)
	}
}

// noFDs adapts a command that passes no descriptors.
func noFDs[T any](fn func(*session, T) (any, error)) func(*session, T) (any, []int, error) {
	return func(ss *session, req T) (any, []int, error) {
		body, err := fn(ss, req)
		return body, nil, err
	}
}

// noReply adapts a command whose reply has no body.
func noReply[T any](fn func(*session, T) error) func(*session, T) (any, []int, error) {
	return func(ss *session, req T) (any, []int, error) { return hostif.Empty{}, nil, fn(ss, req) }
}

// run executes one command and returns its reply body and descriptors;
// the session's record for monitors then counts what the command made or
// destroyed.
func (ss *session) run(op hostif.Op, msg []byte) (any, []int, error) {
	h, ok := handlers[op]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %v", hostif.ErrMessage, op)
	}
	body, fds, err := h(ss, msg)
	ss.publishResources()
	return body, fds, err
}

func (ss *session) allocPD(hostif.Empty) (any, []int, error) {
	if err := ss.take(resPD, 1); err != nil {
		return nil, nil, err
	}
	h := ss.handle()
	ss.pds[h] = ss.s.dev.AllocPD()
	return hostif.HandleReply{Handle: h}, nil, nil
}

func (ss *session) queryGID(req hostif.QueryGIDRequest) (any, []int, error) {
	gid, err := ss.s.dev.GID(int(req.Index))
	if errors.Is(err, verbs.ErrEmptyGID) {
		return nil, nil, fmt.Errorf("GID %d: %w", req.Index, unix.ENODATA)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("GID %d: %w", req.Index, unix.EINVAL)
	}
	return hostif.QueryGIDReply{GID: gid, Type: ibvGIDTypeRoCEv2}, nil, nil
}

// hello starts the session: it takes the client's memory descriptors and
// gives the device's limits, the session page, the async event pipe and
// the doorbell.
func (ss *session) hello(req hostif.HelloRequest) (any, []int, error) {
	if req.Version != hostif.Version {
		return nil, nil, unix.EPROTONOSUPPORT
	}
	if ss.page != nil {
		return nil, nil, errProto
	}
	fds, err := ss.takeFDs(hostif.HelloFDs)
	if err != nil {
		return nil, nil, fmt.Errorf("hello wants /proc/self/mem and /proc/self/maps: %w", err)
	}
	proc, err := procmem.FromDescriptors(fds[hostif.HelloMemFD], fds[hostif.HelloMapsFD])
	if err != nil {
		return nil, nil, err
	}
	// The memory descriptors and the async pipe's write end.
	if err := ss.take(resDescriptor, 3); err != nil {
		proc.Close()
		return nil, nil, err
	}
	fail := func(err error) (any, []int, error) {
		proc.Close()
		ss.give(resDescriptor, 3)
		return nil, nil, err
	}
	page, err := ss.newRing("session", hostif.SessionPageSize)
	if err != nil {
		return fail(err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		ss.freeRing(page)
		return fail(err)
	}
	unix.SetNonblock(p[1], true) // the write end only: a full pipe loses events
	ss.page, ss.async, ss.proc = page, p[1], proc
	ss.procMu.Lock()
	ss.helloProc = proc
	ss.procMu.Unlock()
	ss.s.mu.Lock()
	ss.s.host.add(ss)
	ss.s.mu.Unlock()
	a := ss.s.dev.Query()
	ss.startResources()
	ss.s.cfg.Log.Info("session started", "pid", ss.peer.pid, "uid", ss.peer.uid)
	ss.closeAfterReply = append(ss.closeAfterReply, p[0])
	return hostif.HelloReply{Version: hostif.Version, MaxQPWR: uint32(a.MaxQPWR), MaxSGE: uint32(a.MaxSGE),
		MaxCQE: uint32(a.MaxCQE), MaxInline: uint32(a.MaxInlineData), MaxRdAtomic: uint32(a.MaxQPRdAtom),
		ActiveMTU: uint32(ss.s.dev.ActiveMTU()), Engines: uint32(ss.s.dev.RoCE().Engines()),
		NodeGUID: ss.s.dev.NodeGUID()}, []int{ss.pass(page), p[0], ss.s.doorbellFD}, nil
}

// ibvGIDTypeRoCEv2 is enum ibv_gid_type's IBV_GID_TYPE_ROCE_V2: every GID
// of a softnic device is a RoCE v2 GID.
const ibvGIDTypeRoCEv2 = 2

// maxMTU is the port's max_mtu: the largest IB MTU the link's frames
// hold (roce.MaxMTU), which a QP's path MTU may not pass.
func maxMTU(d *verbs.Device) verbs.MTU {
	room := roce.ActiveIBMTU(roce.MaxMTU(d.RoCE().Link()))
	m := verbs.MTU4096
	for m > verbs.MTU256 && m.Bytes() > room {
		m--
	}
	return m
}

// queryPort answers for port 1, the device's only port (the request's
// handle is the port number, which libibverbs checks itself).
func (ss *session) queryPort(hostif.HandleRequest) (any, []int, error) {
	d := ss.s.dev
	return hostif.QueryPortReply{State: uint8(d.PortState()), MaxMTU: uint8(maxMTU(d)), ActiveMTU: uint8(d.ActiveMTU()), LinkLayer: 2,
		GIDTableLen: uint32(d.RoCE().GIDTableLen()), PKeyTableLen: 1, LinkMTU: uint32(roce.NetdevMTU(d.RoCE().Link())),
		MaxMsgSize: uint32(d.Query().MaxMsgSize)}, nil, nil
}
