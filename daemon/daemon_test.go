package daemon_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/client"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

var addrA, addrB = netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")

// rig is a daemon serving device A of an in-memory link, and an
// in-process device B at the link's other end with one QP.
type rig struct {
	srv    *daemon.Server
	socket string
	a, b   *verbs.Device
	peer   *verbs.QP
	ppd    *verbs.PD
	pscq   *verbs.CQ
	prcq   *verbs.CQ
	pmr    *verbs.MR
	pbuf   []byte
}

func newRig(t testing.TB) *rig { return newRigLimited(t, daemon.Limits{}) }

// newRigLimited is newRig with the daemon's per-user bounds l.
func newRigLimited(t testing.TB, l daemon.Limits) *rig {
	la, lb := memlink.Pair(memlink.Config{})
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	require.NoError(t, err)
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{addrB}})
	require.NoError(t, err)
	r := &rig{a: a, b: b, socket: filepath.Join(t.TempDir(), "softnic_test.sock")}
	r.srv, err = daemon.Serve(a, daemon.Config{Socket: r.socket, Log: slog.New(slog.DiscardHandler), Limits: l})
	require.NoError(t, err)
	t.Cleanup(func() {
		r.srv.Close()
		a.Close()
		b.Close()
		la.Close()
		lb.Close()
	})
	pd := b.AllocPD()
	r.ppd = pd
	r.pscq, err = b.CreateCQ(64, nil)
	require.NoError(t, err)
	r.prcq, err = b.CreateCQ(64, nil)
	require.NoError(t, err)
	r.peer, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: r.pscq, RecvCQ: r.prcq,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	require.NoError(t, err)
	r.pbuf = make([]byte, 1<<16)
	r.pmr, err = pd.RegMR(r.pbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	return r
}

const allAccess = ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead

// toRTS moves a QP through INIT and RTR to RTS, aimed at dest on gid.
func toRTS(t testing.TB, modify func(*ibv.QPAttr, ibv.QPAttrMask) error, dest uint32, gid ibv.GID) {
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: allAccess, Port: 1},
		ibv.QPAttrState|ibv.QPAttrAccessFlags|ibv.QPAttrPort|ibv.QPAttrPKeyIndex))
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: ibv.MTU1024, DestQPN: dest,
		RQPSN: 100, MaxDestRdAtomic: 4, MinRNRTimer: 1, AV: ibv.AddressVector{DGID: gid, HopLimit: 64}},
		ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|
			ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer))
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 100, Timeout: 10, RetryCnt: 7,
		RNRRetry: 7, MaxRdAtomic: 4},
		ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|ibv.QPAttrRetryCnt|
			ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
}

// clientQP is a QP made through the daemon and connected to the rig's peer.
type clientQP struct {
	c   *hostsession.Conn
	pd  uint32
	cq  *hostsession.CQ
	qp  *hostsession.QP
	buf []byte
	mr  hostsession.MR
}

func connectClient(t testing.TB, r *rig) *clientQP {
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	q := &clientQP{c: c, buf: make([]byte, 1<<16)}
	q.pd, err = c.AllocPD()
	require.NoError(t, err)
	q.mr, err = c.RegMR(q.pd, q.buf, allAccess)
	require.NoError(t, err)
	q.cq, err = c.CreateCQ(64, nil, 0)
	require.NoError(t, err)
	q.qp, err = c.CreateQP(hostif.CreateQPRequest{PD: q.pd, SendCQ: q.cq.Handle, RecvCQ: q.cq.Handle,
		MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64})
	require.NoError(t, err)
	gidA, err := r.a.GID(0)
	require.NoError(t, err)
	gidB, err := r.b.GID(0)
	require.NoError(t, err)
	toRTS(t, q.qp.Modify, r.peer.QPN(), gidB)
	toRTS(t, r.peer.Modify, q.qp.QPN, gidA)
	require.Equal(t, ibv.QPSRTS, q.qp.State())
	return q
}

// reconnect makes a QP through c and connects the rig's peer QP to it
// instead (from RESET).
func (r *rig) reconnect(t *testing.T, c *hostsession.Conn, req hostif.CreateQPRequest) *hostsession.QP {
	qp, err := c.CreateQP(req)
	require.NoError(t, err)
	gidA, _ := r.a.GID(0)
	gidB, _ := r.b.GID(0)
	require.NoError(t, r.peer.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	toRTS(t, qp.Modify, r.peer.QPN(), gidB)
	toRTS(t, r.peer.Modify, qp.QPN, gidA)
	return qp
}

// poll waits for one completion on the client's CQ.
func (q *clientQP) poll(t *testing.T) ibv.WC {
	wcs := make([]ibv.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := q.cq.Poll(wcs)
		require.NoError(t, err)
		if n == 1 {
			return wcs[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatal("no completion from the daemon")
	return ibv.WC{}
}

// waitWrites waits until n WRITEs changed the peer's region: reading the
// sequence orders the test's reads after the engine's writes (the client's
// completion comes through shared memory, which the race detector does not
// see as ordering).
func (r *rig) waitWrites(t *testing.T, n uint64) {
	require.Eventually(t, func() bool { return r.pmr.RemoteWriteSeq() >= n }, 10*time.Second, 10*time.Microsecond)
}

func waitPeer(t *testing.T, cq *verbs.CQ) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	_, err := cq.Wait(ctx, wcs)
	require.NoError(t, err)
	return wcs[0]
}

// A client's work goes through the daemon's shared rings both ways: its
// WRITE and SEND leave from its memory, a peer's WRITE and SEND land in it,
// and its completions come back through the CQ ring.
func TestClientThroughDaemon(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	for i := range q.buf {
		q.buf[i] = byte(i * 3)
	}

	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 5000)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
	wc := q.poll(t)
	require.Equal(t, ibv.WCSuccess, wc.Status)
	require.EqualValues(t, 1, wc.WRID)
	require.Equal(t, ibv.WCRDMAWrite, wc.Opcode)
	r.waitWrites(t, 1)
	require.Equal(t, q.buf[:5000], r.pbuf[:5000])

	// The peer writes into the client's buffer and sends to its receive.
	for i := range r.pbuf {
		r.pbuf[i] = byte(i * 5)
	}
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(0, 3000)}, RemoteAddr: q.mr.Addr + 10000, RKey: q.mr.RKey}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	require.Equal(t, r.pbuf[:3000], q.buf[10000:13000])

	require.NoError(t, q.qp.PostRecv(&ibv.RecvWR{ID: 3, SGL: []ibv.SGE{q.mr.SGE(20000, 100), q.mr.SGE(30000, 1000)}}))
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSendWithImm, Imm: 0x01020304, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(100, 600)}}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	wc = q.poll(t)
	require.Equal(t, ibv.WCSuccess, wc.Status)
	require.Equal(t, ibv.WCRecv, wc.Opcode)
	require.EqualValues(t, 3, wc.WRID)
	require.EqualValues(t, 600, wc.ByteLen)
	require.EqualValues(t, 0x01020304, wc.Imm)
	require.Equal(t, r.pbuf[100:200], q.buf[20000:20100])
	require.Equal(t, r.pbuf[200:700], q.buf[30000:30500])

	// The client's SEND, gathered from two pieces of its memory.
	require.NoError(t, r.peer.PostRecv(&verbs.RecvWR{ID: 5, SGL: []verbs.SGE{r.pmr.SGE(40000, 2000)}}))
	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 6, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 10), q.mr.SGE(500, 20)}}))
	require.Equal(t, ibv.WCSuccess, q.poll(t).Status)
	rwc := waitPeer(t, r.prcq)
	require.Equal(t, verbs.WCSuccess, rwc.Status)
	require.EqualValues(t, 30, rwc.ByteLen)
	require.Equal(t, append(append([]byte{}, q.buf[:10]...), q.buf[500:520]...), r.pbuf[40000:40030])

	// A READ from the peer into the client's memory, and inline data.
	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 7, Opcode: ibv.WRRDMARead, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(50000, 4000)}, RemoteAddr: r.pmr.Addr() + 8000, RKey: r.pmr.RKey()}))
	require.Equal(t, ibv.WCSuccess, q.poll(t).Status)
	require.Equal(t, r.pbuf[8000:12000], q.buf[50000:54000])
	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 8, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled | ibv.SendInline,
		InlineData: []byte("inline!"), RemoteAddr: r.pmr.Addr() + 60000, RKey: r.pmr.RKey()}))
	require.Equal(t, ibv.WCSuccess, q.poll(t).Status)
	r.waitWrites(t, 2)
	require.Equal(t, []byte("inline!"), r.pbuf[60000:60007])
}

// Closing the session destroys what it made: its QP is gone (the peer's
// requests to it go unanswered) and the daemon has no session left.
func TestSessionEndDestroysObjects(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.Equal(t, 1, r.srv.Sessions())
	before := r.a.QPs()
	require.NoError(t, q.c.Close())
	require.Eventually(t, func() bool { return r.srv.Sessions() == 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, before-1, r.a.QPs(), "the client's QP is destroyed")
}

// Commands on handles the session does not have, or out of order, get the
// errno a kernel driver gives.
func TestBadCommands(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	_, err := q.c.RegMR(999, q.buf, allAccess)
	require.ErrorIs(t, err, unix.ENOENT)
	_, err = q.c.RegMR(q.pd, make([]byte, 0), allAccess)
	require.NoError(t, err, "an empty region")
	_, err = q.c.CreateCQ(0, nil, 0)
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = q.c.CreateQP(hostif.CreateQPRequest{PD: q.pd, SendCQ: q.cq.Handle, RecvCQ: 77, MaxSendWR: 1, MaxRecvWR: 1})
	require.ErrorIs(t, err, unix.ENOENT)
	_, err = q.c.CreateQP(hostif.CreateQPRequest{PD: q.pd, Type: 4, SendCQ: q.cq.Handle, RecvCQ: q.cq.Handle, MaxSendWR: 1, MaxRecvWR: 1})
	require.ErrorIs(t, err, unix.EINVAL, "no QP type 4 (3 is raw packet)")
	_, err = q.c.CreateQP(hostif.CreateQPRequest{PD: q.pd, SRQ: 1, SendCQ: q.cq.Handle, RecvCQ: q.cq.Handle, MaxSendWR: 1, MaxRecvWR: 1})
	require.ErrorIs(t, err, unix.ENOENT, "an SRQ the session does not have")

	// A second client cannot use the first one's handles.
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer other.Close()
	_, err = other.RegMR(q.pd, q.buf, allAccess)
	require.ErrorIs(t, err, unix.ENOENT)
}

// A client that writes garbage into its own send queue gets an error
// completion and its QP in the error state; the daemon and the other
// client's QP go on.
func TestGarbageInSendQueue(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.NoError(t, q.qp.PostSendEntry(func(e []byte) {
		for i := range e {
			e[i] = 0xee
		}
		copy(e, []byte{42, 0, 0, 0, 0, 0, 0, 0}) // wr_id 42
	}))
	wc := q.poll(t)
	require.EqualValues(t, 42, wc.WRID)
	require.Equal(t, ibv.WCLocQPOpErr, wc.Status)
	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 43, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 8)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
	wc = q.poll(t)
	require.EqualValues(t, 43, wc.WRID)
	require.Equal(t, ibv.WCWRFlushErr, wc.Status, "the QP is in the error state")

	// The daemon still serves.
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer other.Close()
	_, err = other.AllocPD()
	require.NoError(t, err)
}

// A completion channel gets the CQ's user handle when an armed CQ gets a
// completion (what ibv_get_cq_event reads), and a CQ that overruns sends
// IBV_EVENT_CQ_ERR with its user handle down the async pipe (what
// ibv_get_async_event reads).
func TestEventsThroughDaemon(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	ch, err := q.c.CreateCompChannel()
	require.NoError(t, err)
	defer ch.File.Close()
	cq, err := q.c.CreateCQ(1, ch, 0xcafe)
	require.NoError(t, err)
	qp := r.reconnect(t, q.c, hostif.CreateQPRequest{PD: q.pd, SendCQ: cq.Handle, RecvCQ: q.cq.Handle,
		MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, UserHandle: 0xbeef})

	write := func(id uint64) {
		require.NoError(t, qp.PostSend(&ibv.SendWR{ID: id, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
			SGL: []ibv.SGE{q.mr.SGE(0, 8)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
	}
	read := func(f *os.File, n int) []byte {
		f.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, n)
		_, err := io.ReadFull(f, b)
		require.NoError(t, err)
		return b
	}
	cq.Arm(false)
	write(1)
	require.Equal(t, uint64(0xcafe), binary.LittleEndian.Uint64(read(ch.File, 8)))

	// The CQ holds one completion, unpolled: the second overruns it.
	write(2)
	rec := read(q.c.Async, 16)
	require.Equal(t, uint64(0xcafe), binary.LittleEndian.Uint64(rec[0:]))
	require.EqualValues(t, 0, binary.LittleEndian.Uint32(rec[8:]), "IBV_EVENT_CQ_ERR")
	rec = read(q.c.Async, 16)
	require.Equal(t, uint64(0xbeef), binary.LittleEndian.Uint64(rec[0:]))
	require.EqualValues(t, 1, binary.LittleEndian.Uint32(rec[8:]), "IBV_EVENT_QP_FATAL: the overrun moved the QP to ERR")
}

// One client's lkey means nothing in another client's work requests: the
// request completes with a local protection error, as with a key of
// another process on a kernel driver, and the first client's memory is
// not read.
func TestLKeysArePerSession(t *testing.T) {
	r := newRig(t)
	victim := connectClient(t, r)
	copy(victim.buf, "secret")

	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	cq, err := c.CreateCQ(8, nil, 0)
	require.NoError(t, err)
	qp := r.reconnect(t, c, hostif.CreateQPRequest{PD: pd, SendCQ: cq.Handle, RecvCQ: cq.Handle,
		MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})

	require.NoError(t, qp.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{victim.mr.SGE(0, 6)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
	wcs := make([]ibv.WC, 1)
	require.Eventually(t, func() bool { n, _ := cq.Poll(wcs); return n == 1 }, 10*time.Second, 50*time.Microsecond)
	require.Equal(t, ibv.WCLocProtErr, wcs[0].Status)
	require.NotEqual(t, []byte("secret"), r.pbuf[:6])
}

// A session's rings are bounded: a client cannot take the daemon's memory.
func TestSessionRingLimit(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = q.c.CreateCQ(verbs.MaxCQE, nil, 0) // 256 MiB each
	}
	require.ErrorIs(t, err, unix.ENOMEM)
	_, err = q.c.CreateCQ(16, nil, 0)
	require.NoError(t, err, "small rings still fit")
}

// A message that is not one of ours gets an error reply, and the session
// goes on.
func TestGarbageMessage(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.NoError(t, q.c.Raw([]byte("hello, daemon"), 5*time.Second))
	_, err := q.c.AllocPD()
	require.NoError(t, err)
}

// UD through the daemon: a client's datagram to the peer's UD QP through an
// address handle, and the peer's answer into the client's receive buffer,
// behind the GRH.
func TestUDThroughDaemon(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	const qkey = 0x1234
	gidA, _ := r.a.GID(0)
	gidB, _ := r.b.GID(0)

	peer, err := r.ppd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: r.pscq, RecvCQ: r.prcq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	udReady(t, peer.Modify, qkey)
	qp, err := q.c.CreateQP(hostif.CreateQPRequest{PD: q.pd, Type: uint32(verbs.QPTypeUD), SendCQ: q.cq.Handle, RecvCQ: q.cq.Handle,
		MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, err)
	udReady(t, qp.Modify, qkey)

	require.NoError(t, peer.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{r.pmr.SGE(0, verbs.GRHLen+100)}}))
	ah, err := q.c.CreateAH(q.pd, &ibv.AddressVector{DGID: gidB, HopLimit: 64})
	require.NoError(t, err)
	copy(q.buf, "datagram")
	require.NoError(t, qp.PostSendTo(&ibv.SendWR{ID: 2, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 8)}, RemoteQPN: peer.QPN(), RemoteQKey: qkey}, ah))
	require.Equal(t, ibv.WCSuccess, q.poll(t).Status)
	wc := waitPeer(t, r.prcq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, qp.QPN, wc.SrcQP)
	require.Equal(t, []byte("datagram"), r.pbuf[verbs.GRHLen:verbs.GRHLen+8])

	require.NoError(t, qp.PostRecv(&ibv.RecvWR{ID: 3, SGL: []ibv.SGE{q.mr.SGE(1000, verbs.GRHLen+100)}}))
	pah, err := r.ppd.CreateAH(&verbs.AddressVector{DGID: gidA, HopLimit: 64})
	require.NoError(t, err)
	copy(r.pbuf[500:], "answer")
	require.NoError(t, peer.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(500, 6)}, AH: pah, RemoteQPN: qp.QPN, RemoteQKey: qkey}))
	wc = q.poll(t)
	require.Equal(t, ibv.WCSuccess, wc.Status)
	require.EqualValues(t, 3, wc.WRID)
	require.NotZero(t, wc.Flags&ibv.WCWithGRH)
	require.Equal(t, []byte("answer"), q.buf[1000+verbs.GRHLen:1000+verbs.GRHLen+6])

	// A send naming an AH the session does not have fails, as does one
	// after the AH is destroyed.
	require.NoError(t, q.c.DestroyAH(ah))
	require.NoError(t, qp.PostSendTo(&ibv.SendWR{ID: 5, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 8)}, RemoteQPN: peer.QPN(), RemoteQKey: qkey}, ah))
	wc = q.poll(t)
	require.EqualValues(t, 5, wc.WRID)
	require.Equal(t, ibv.WCLocQPOpErr, wc.Status)
	require.ErrorIs(t, q.c.DestroyAH(ah), unix.ENOENT)
}

// A UD send naming an AH handle of another session fails: each session's
// handles name its own AHs only, whatever numbers they share.
func TestUDAHOfAnotherSession(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	otherPD, err := other.AllocPD()
	require.NoError(t, err)
	const qkey = 0x1234
	gidB, _ := r.b.GID(0)
	qp, err := q.c.CreateQP(hostif.CreateQPRequest{PD: q.pd, Type: uint32(verbs.QPTypeUD), SendCQ: q.cq.Handle,
		RecvCQ: q.cq.Handle, MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, err)
	udReady(t, qp.Modify, qkey)
	own, err := q.c.CreateAH(q.pd, &ibv.AddressVector{DGID: gidB, HopLimit: 64})
	require.NoError(t, err)
	var foreign uint32
	for foreign == 0 || foreign == own {
		foreign, err = other.CreateAH(otherPD, &ibv.AddressVector{DGID: gidB, HopLimit: 64})
		require.NoError(t, err)
	}
	require.NoError(t, qp.PostSendTo(&ibv.SendWR{ID: 7, Opcode: ibv.WRSend, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 8)}, RemoteQPN: 1, RemoteQKey: qkey}, foreign))
	wc := q.poll(t)
	require.EqualValues(t, 7, wc.WRID)
	require.Equal(t, ibv.WCLocQPOpErr, wc.Status)
}

// udReady moves a UD QP to RTS with Q_Key qkey.
func udReady(t *testing.T, modify func(*ibv.QPAttr, ibv.QPAttrMask) error, qkey uint32) {
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSInit, Port: 1, QKey: qkey},
		ibv.QPAttrState|ibv.QPAttrPort|ibv.QPAttrPKeyIndex|ibv.QPAttrQKey))
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSRTR}, ibv.QPAttrState))
	require.NoError(t, modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 1}, ibv.QPAttrState|ibv.QPAttrSQPSN))
}

// The port and GID queries answer what the device is, as ibv_query_port
// and ibv_query_gid report a RoCE port.
func TestQueries(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	require.Equal(t, r.a.NodeGUID(), q.c.Device.NodeGUID)
	port, err := q.c.QueryPort()
	require.NoError(t, err)
	require.EqualValues(t, 4, port.State, "ACTIVE")
	require.EqualValues(t, 2, port.LinkLayer, "Ethernet")
	require.EqualValues(t, r.a.ActiveMTU(), port.ActiveMTU)
	require.EqualValues(t, r.a.RoCE().GIDTableLen(), port.GIDTableLen)
	require.Greater(t, int(port.GIDTableLen), len(r.a.GIDTable()), "empty entries after the addresses")
	gid, err := q.c.QueryGID(0)
	require.NoError(t, err)
	want, _ := r.a.GID(0)
	require.Equal(t, want, gid)
	_, err = q.c.QueryGID(len(r.a.GIDTable()))
	require.ErrorIs(t, err, unix.ENODATA, "an empty entry")
	_, err = q.c.QueryGID(int(port.GIDTableLen))
	require.ErrorIs(t, err, unix.EINVAL)
}

// An SRQ through the daemon: the QP attached to it consumes the receives
// the client posted to the SRQ, the limit event comes down the async pipe,
// and an SRQ in use cannot be destroyed.
func TestSRQThroughDaemon(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	srq, err := q.c.CreateSRQ(q.pd, 8, 1, 0, 0x5a5a)
	require.NoError(t, err)
	qp := r.reconnect(t, q.c, hostif.CreateQPRequest{PD: q.pd, SendCQ: q.cq.Handle, RecvCQ: q.cq.Handle, SRQ: srq.Handle,
		MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	require.Error(t, qp.PostRecv(&ibv.RecvWR{ID: 9}), "the QP has no receive queue of its own")
	for i := range 3 {
		require.NoError(t, srq.PostRecv(&ibv.RecvWR{ID: uint64(10 + i), SGL: []ibv.SGE{q.mr.SGE(i*100, 100)}}))
	}
	require.NoError(t, srq.Modify(3))
	copy(r.pbuf, "via the SRQ")
	require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{r.pmr.SGE(0, 11)}}))
	require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
	wc := q.poll(t)
	require.Equal(t, ibv.WCSuccess, wc.Status)
	require.EqualValues(t, 10, wc.WRID)
	require.Equal(t, []byte("via the SRQ"), q.buf[:11])

	q.c.Async.SetReadDeadline(time.Now().Add(10 * time.Second))
	rec := make([]byte, 16)
	_, err = io.ReadFull(q.c.Async, rec)
	require.NoError(t, err)
	require.Equal(t, uint64(0x5a5a), binary.LittleEndian.Uint64(rec))
	require.EqualValues(t, 15, binary.LittleEndian.Uint32(rec[8:]), "IBV_EVENT_SRQ_LIMIT_REACHED")

	require.ErrorIs(t, srq.Destroy(), unix.EBUSY)
	require.NoError(t, qp.Destroy())
	require.NoError(t, srq.Destroy())
}

// A client that rings the doorbell eventfd (the engine slept) wakes the
// engine, and the daemon still closes promptly afterwards.
func TestDoorbellWakesSleepingEngine(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	for i := range 3 {
		time.Sleep(20 * time.Millisecond) // the engine's spin ends: it sleeps
		require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: uint64(i), Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
			SGL: []ibv.SGE{q.mr.SGE(0, 8)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
		require.Equal(t, ibv.WCSuccess, q.poll(t).Status)
	}
	require.NotZero(t, r.srv.Doorbells(), "the engine never slept, or the client never rang")
	done := make(chan struct{})
	go func() { r.srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after the doorbell rang")
	}
}

// The verbs API on a device reached through the daemon (client.DialDevice): the
// same calls as in-process, two sessions at once.
func TestVerbsThroughDaemon(t *testing.T) {
	r := newRig(t)
	gidA, _ := r.a.GID(0)
	gidB, _ := r.b.GID(0)
	for round := range 2 {
		dev, err := client.DialDevice(r.socket)
		require.NoError(t, err)
		g, err := dev.GID(0)
		require.NoError(t, err)
		require.Equal(t, gidA, g)
		require.Equal(t, r.a.ActiveMTU(), dev.ActiveMTU())
		require.Nil(t, dev.RoCE(), "no engine in this process")

		pd := dev.AllocPD()
		buf := make([]byte, 1<<16)
		for i := range buf {
			buf[i] = byte(i + round)
		}
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		require.NoError(t, err)
		cq, err := dev.CreateCQ(32, nil)
		require.NoError(t, err)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, r.peer.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
		toRTS(t, qp.Modify, r.peer.QPN(), gidB)
		toRTS(t, r.peer.Modify, qp.QPN(), gidA)
		require.Equal(t, verbs.QPSRTS, qp.State())

		require.NoError(t, qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 20000)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
		wc := waitPeer(t, cq)
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, qp.QPN(), wc.QPN)
		r.waitWrites(t, uint64(round+1))
		require.Equal(t, buf[:20000], r.pbuf[:20000])

		require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: 2, SGL: []verbs.SGE{mr.SGE(30000, 100)}}))
		require.NoError(t, r.peer.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{r.pmr.SGE(0, 100)}}))
		require.Equal(t, verbs.WCSuccess, waitPeer(t, r.pscq).Status)
		wc = waitPeer(t, cq)
		require.Equal(t, verbs.WCRecv, wc.Opcode)
		require.Equal(t, r.pbuf[:100], buf[30000:30100])

		require.NoError(t, qp.Destroy())
		require.NoError(t, mr.Dereg())
		require.NoError(t, dev.Close())
	}
	require.Eventually(t, func() bool { return r.srv.Sessions() == 0 }, 5*time.Second, time.Millisecond)
}
