package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
)

// FuzzControlMessages sends arbitrary messages to a running daemon on a
// session that said hello: each gets an error reply, or the session ends
// (a message that is not one of ours), and the daemon keeps serving new
// sessions.
func FuzzControlMessages(f *testing.F) {
	buf := make([]byte, hostif.MaxMessage)
	seed := func(op hostif.Op, body any) {
		msg, err := hostif.Encode(buf, hostif.Header{Op: op, Seq: 7}, body)
		require.NoError(f, err)
		f.Add(append([]byte{}, msg...))
	}
	seed(hostif.OpAllocPD, hostif.Empty{})
	seed(hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 7, Addr: 4096, Length: 1 << 40})
	seed(hostif.OpCreateCQ, hostif.CreateCQRequest{Entries: 1 << 30, Channel: 3})
	seed(hostif.OpResizeCQ, hostif.ResizeCQRequest{Handle: 2, Entries: 1 << 30})
	seed(hostif.OpResizeCQ, hostif.ResizeCQRequest{Handle: 2, Entries: 1})
	seed(hostif.OpCreateQP, hostif.CreateQPRequest{PD: 1, SendCQ: 2, RecvCQ: 2, MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1 << 20})
	seed(hostif.OpModifyQP, hostif.ModifyQPRequest{Handle: 3, Mask: 0xffffffff, State: 9, PathMTU: 200})
	seed(hostif.OpDestroyQP, hostif.HandleRequest{Handle: 3})
	seed(hostif.OpCreateQP, hostif.CreateQPRequest{PD: 1, SendCQ: 2, RecvCQ: 2, MaxSendWR: 1, MaxRecvWR: 1, Type: 3})
	seed(hostif.OpCreateFlow, hostif.CreateFlowRequest{QP: 3, Port: 1, NumSpecs: 200})
	seed(hostif.OpCreateFlow, hostif.CreateFlowRequest{QP: 3, Port: 1, NumSpecs: 1,
		Specs: [hostif.MaxFlowSpecs]hostif.FlowSpec{{Type: 0x20, Size: 1}}})
	seed(hostif.OpDestroyFlow, hostif.HandleRequest{Handle: 4})
	seed(hostif.OpCreateRSSQP, hostif.CreateRSSQPRequest{PD: 1, CQ: 2, LogSize: 9, Function: 1, Wqs: [64]uint32{3}})
	seed(hostif.OpHello, hostif.HelloRequest{Version: 1})
	seed(hostif.OpQueryResources, hostif.ResourcesRequest{After: 1 << 31})
	seed(hostif.OpQueryCMIDs, hostif.CMIDsRequest{AfterSession: 1 << 31, AfterID: 7})
	seed(hostif.OpQueryCounters, hostif.CountersRequest{From: 1 << 31})
	seed(hostif.OpQueryCounters, hostif.CountersRequest{Flags: 1, QPN: 1})
	seed(hostif.OpQueryCounters, hostif.CountersRequest{Flags: 7})
	seed(hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: 1 << 12, Length: 1 << 60})
	seed(hostif.OpUnshareMemory, hostif.HandleRequest{Handle: 1})
	seed(hostif.OpAllocDM, hostif.AllocDMRequest{Length: 100, LogAlign: 6})
	seed(hostif.OpRegDMMR, hostif.RegDMMRRequest{PD: 1, Dm: 2, Access: 0x21, Offset: 1 << 63, Length: 1 << 63})
	seed(hostif.OpFreeDM, hostif.HandleRequest{Handle: 2})
	seed(hostif.OpAllocMW, hostif.AllocMWRequest{PD: 1, Type: 2})
	seed(hostif.OpAllocMW, hostif.AllocMWRequest{PD: 1, Type: 1 << 31})
	seed(hostif.OpDeallocMW, hostif.HandleRequest{Handle: 2})
	seed(hostif.Op(999), hostif.Empty{})
	// ODP: an implicit region, advice past its count, rereg of it.
	seed(hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 1 | 1<<6, Addr: 0, Length: 1<<64 - 1})
	seed(hostif.OpAdviseMR, hostif.AdviseMRRequest{PD: 1, Advice: 1, Flags: 1, Count: 33})
	seed(hostif.OpAdviseMR, hostif.AdviseMRRequest{PD: 1, Advice: 2, Count: 1,
		SGE: [hostif.AdviseSGEs]hostif.AdviseSGE{{Addr: 1<<64 - 8, Length: 1 << 31}}})
	seed(hostif.OpReregMR, hostif.ReregMRRequest{Handle: 2, Flags: 7, PD: 1, Access: 1 << 6, Addr: 1<<64 - 4096, Length: 1 << 20})
	// The connection manager's commands, with handles a session's first
	// objects get (1, 2, 3...).
	seed(hostif.OpCMCreateChannel, hostif.Empty{})
	seed(hostif.OpCMCreateID, hostif.CMCreateIDRequest{Channel: 1, PortSpace: 0x0106})
	seed(hostif.OpCMCreateID, hostif.CMCreateIDRequest{Channel: 1, PortSpace: 1 << 20})
	seed(hostif.OpCMCreateID, hostif.CMCreateIDRequest{Channel: 1, PortSpace: 0x0111}) // UDP: UD QPs
	seed(hostif.OpCMCreateQP, hostif.CMCreateQPRequest{ID: 2, QP: hostif.CreateQPRequest{PD: 3, SendCQ: 4, RecvCQ: 4, Type: 2, MaxSendWR: 1, MaxRecvWR: 1}})
	seed(hostif.OpCMBind, hostif.CMAddrRequest{ID: 2, Port: 7000, Addr: hostif.CMAddr(addrA)})
	seed(hostif.OpCMBind, hostif.CMAddrRequest{ID: 2, Addr: [16]byte{0xff, 1}})
	seed(hostif.OpCMListen, hostif.CMListenRequest{ID: 2, Backlog: 1 << 31})
	seed(hostif.OpCMResolveAddr, hostif.CMResolveAddrRequest{ID: 2, TimeoutMS: 1 << 31, DstPort: 7000, Dst: hostif.CMAddr(addrB)})
	seed(hostif.OpCMResolveAddr, hostif.CMResolveAddrRequest{ID: 2, Src: [16]byte{1}, Dst: [16]byte{}})
	seed(hostif.OpCMResolveRoute, hostif.CMResolveRouteRequest{ID: 2, TimeoutMS: 10})
	seed(hostif.OpCMCreateQP, hostif.CMCreateQPRequest{ID: 2, QP: hostif.CreateQPRequest{PD: 3, SendCQ: 4, RecvCQ: 4, MaxSendWR: 1, MaxRecvWR: 1}})
	seed(hostif.OpCMCreateQP, hostif.CMCreateQPRequest{ID: 2, QP: hostif.CreateQPRequest{PD: 3, SendCQ: 4, RecvCQ: 4, Type: 3}})
	seed(hostif.OpCMConnect, hostif.CMConnParam{ID: 2, PrivateLen: 1 << 30})
	seed(hostif.OpCMConnect, hostif.CMConnParam{ID: 2, PrivateLen: 56, RetryCount: 200})
	seed(hostif.OpCMAccept, hostif.CMConnParam{ID: 5, PrivateLen: 200})
	seed(hostif.OpCMReject, hostif.CMConnParam{ID: 5, PrivateLen: 224})
	seed(hostif.OpCMDisconnect, hostif.HandleRequest{Handle: 2})
	seed(hostif.OpCMDetachQP, hostif.HandleRequest{Handle: 2})
	seed(hostif.OpCMQueryAddr, hostif.HandleRequest{Handle: 2})
	seed(hostif.OpCMGetEvent, hostif.CMGetEventRequest{Channel: 1})
	seed(hostif.OpCMDestroyID, hostif.HandleRequest{Handle: 2})
	seed(hostif.OpCMSetOption, hostif.CMSetOptionRequest{ID: 2, Option: 3, Value: 1 << 31})
	seed(hostif.OpCMMigrateID, hostif.CMMigrateRequest{ID: 2, Channel: 1})
	seed(hostif.OpCMMigrateID, hostif.CMMigrateRequest{ID: 2, Channel: 99})
	seed(hostif.OpCMConnect, hostif.CMConnParam{ID: 2, QPNum: 0xffffff})
	seed(hostif.OpCMAccept, hostif.CMConnParam{ID: 5, QPNum: 1})
	seed(hostif.OpCMInitQPAttr, hostif.CMInitQPAttrRequest{ID: 2, State: 3})
	seed(hostif.OpCMInitQPAttr, hostif.CMInitQPAttrRequest{ID: 5, State: 1 << 31})
	seed(hostif.OpCMEstablish, hostif.HandleRequest{Handle: 2})

	r := newRig(f)
	var conn *hostsession.Conn
	f.Fuzz(func(t *testing.T, msg []byte) {
		if conn == nil {
			c, err := hostsession.Dial(r.socket)
			require.NoError(t, err, "the daemon stopped serving")
			conn = c
		}
		if err := conn.Raw(msg, 5*time.Second); err != nil {
			conn.Close()
			conn = nil // the session ended; the next input dials again
		}
	})
}
