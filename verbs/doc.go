// Package verbs is softnic's RDMA API, shaped after libibverbs so that RDMA
// programmers find their way: open a Device on a link, allocate a protection
// domain, register memory regions, create completion queues and
// reliable-connected (RC) or unreliable-datagram (UD) queue pairs, move the
// QPs through INIT, RTR and RTS with Modify, then post work requests and
// poll completions. UD sends name an address handle (PD.CreateAH, or
// PD.CreateAHFromWC to answer a receive), and every UD receive buffer
// starts with the 40-byte GRH.
//
//	dev, _ := verbs.Open(link, verbs.Config{Addrs: []netip.Addr{addr}})
//	pd := dev.AllocPD()
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	cq, _ := dev.CreateCQ(256, nil)
//	qp, _ := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64}})
//	// qp.Modify(...) to INIT, RTR (with the peer's QPN, PSN and GID) and RTS
//	qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
//		SGL: []verbs.SGE{mr.SGE(0, len(buf))}, RemoteAddr: peerAddr, RKey: peerRKey})
//	n, _ := cq.Wait(ctx, wcs)
//
// The names follow libibverbs with Go spelling: ibv_post_send is
// QP.PostSend, IBV_WC_REM_ACCESS_ERR is WCRemAccessErr. Memory regions are
// Go byte slices; an SGE or a remote address is a virtual address inside a
// region (MR.Addr plus an offset), and every access, local or remote, is
// checked against the region's bounds, protection domain and access rights.
// A memory window (PD.AllocMW) opens part of a region to peers with rights
// of its own: QP.BindMW binds a type 1 window, a SendWR with WRBindMW a
// type 2 one (to the posting QP); WRLocalInv and a peer's SEND_WITH_INV
// invalidate a type 2 window.
//
// Completions are polled in batches (CQ.Poll), waited for with a context
// (CQ.Wait), or signalled on a CompChannel after CQ.RequestNotify. A CQ
// made with CreateCQEx and Timestamps carries the device clock's time each
// completion was made at (WC.Timestamp, Device.Clock: clock.go), and
// CQ.Resize grows or shrinks a CQ, keeping what it holds.
// Asynchronous events (QP fatal, SQ drained, SRQ limit, last WQE reached)
// arrive on Device.Events.
//
// A device that a softnic daemon serves to many processes is opened by
// name with daemon/client's OpenDevice (softnic_IFACE) or by socket with
// its DialDevice: the same Device and calls, with the daemon running the
// transport and placing data straight into this process's registered
// memory (docs/HOST-INTERFACE.md). Its QPs are RC, UC and UD, with SRQs,
// address handles, completion channels and async events; the connection
// manager, Device.Poll and the engines' counters stay in the daemon. The
// two are backends behind the same API (backend.go): each object holds
// its backend's half, as a libibverbs context holds its provider's ops.
//
// A Device runs an engine goroutine per receive queue of its link (up to
// the number of CPUs; Config.Engines), each owning the protocol state of
// the QPs placed on it when they connect; verbs calls hand work to a QP's
// engine through lock-free rings and a doorbell, so posting and polling may
// happen from any goroutine. The packet path allocates nothing. A
// goroutine that polls an empty CQ runs the engines that have QPs itself
// (Device.Poll): while a program keeps polling, as latency-bound programs
// do, frames are received, sent and completed in its thread and the engine
// goroutines nap, so a reply needs no hand-off between threads. CQ.Wait
// and CompChannel.Get give the engines back before they block.
//
// The in-process backend (engine*.go) implements the verbs objects:
// protection domains, memory regions (random keys, the key table, bounds
// and access checks), completion queues and channels, shared receive
// queues and the event channel. Package ibtransport implements the
// transport: queue pairs and their requester, responder and completer,
// which reach this backend's objects through the interfaces ibtransport
// defines (a PD resolves memory keys to checked regions, a CQ takes
// completions); a QP of this backend is ibtransport's QP. The work request
// and completion types and the QP attributes are ibtransport's, under
// their libibverbs names here. Open joins the two to a RoCE device.
//
// A packet's path: roce decapsulates it and checks the ICRC, the
// ibtransport responder executes it, writing into an MR of this package
// through the PD's key lookup, and completes the receive into a CQ of this
// package.
package verbs
