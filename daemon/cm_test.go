package daemon_test

import (
	"bytes"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/client"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// cmSide is a device of an in-memory link, served by a daemon or not, and
// the devices and CMs of the programs that use it.
type cmSide struct {
	dev    *verbs.Device // the device itself
	socket string        // its daemon's socket; "" when in-process
}

// newCMSides opens both ends of an in-memory link; each end whose served
// is true gets a daemon.
func newCMSides(t *testing.T, servedA, servedB bool) (a, b *cmSide) {
	la, lb := memlink.Pair(memlink.Config{})
	open := func(l *memlink.Endpoint, addr netip.Addr, served bool, name string) *cmSide {
		dev, err := verbs.Open(l, verbs.Config{Addrs: []netip.Addr{addr}})
		require.NoError(t, err)
		s := &cmSide{dev: dev}
		var srv *daemon.Server
		if served {
			s.socket = filepath.Join(t.TempDir(), "softnic_"+name+".sock")
			srv, err = daemon.Serve(dev, daemon.Config{Socket: s.socket, Log: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
		}
		t.Cleanup(func() {
			if srv != nil {
				srv.Close()
			}
			dev.Close()
			l.Close()
		})
		return s
	}
	return open(la, addrA, servedA, "a"), open(lb, addrB, servedB, "b")
}

// program opens the device as a program does (through the daemon when
// served) and a CM over it.
func (s *cmSide) program(t *testing.T) (*verbs.Device, *rdmacm.CM) {
	dev := s.dev
	if s.socket != "" {
		var err error
		dev, err = client.DialDevice(s.socket)
		require.NoError(t, err)
		require.True(t, dev.Remote())
		t.Cleanup(func() { dev.Close() })
	}
	c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{dev}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return dev, c
}

// cmEvent returns ch's next event, which must be of type want (TIMEWAIT_EXIT
// passed over).
func cmEvent(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) rdmacm.Event {
	t.Helper()
	return rdmacmtest.NextEvent(t, ch, want, 20*time.Second)
}

// cmConn is one end of a connection: its ID, QP, CQ and a region.
type cmConn struct {
	id *rdmacm.ID
	qp *verbs.QP
	cq *verbs.CQ
	mr *verbs.MR
	q  *rdmacmtest.QP // qp, cq and mr
}

// cmQP gives id a QP, a CQ and a region with a receive posted.
func cmQP(t *testing.T, id *rdmacm.ID) *cmConn {
	q := rdmacmtest.NewQP(t, id)
	assert.Equal(t, verbs.QPSInit, q.QP.State())
	return &cmConn{id: id, qp: q.QP, cq: q.CQ, mr: q.MR, q: q}
}

func (c *cmConn) waitWC(t *testing.T) verbs.WC {
	t.Helper()
	return rdmacmtest.WaitWC(t, c.cq, 20*time.Second)
}

// cmListen makes an ID of c listen on ap.
func cmListen(t *testing.T, c *rdmacm.CM, ap netip.AddrPort) (*rdmacm.ID, *rdmacm.EventChannel) {
	ch := c.NewEventChannel()
	id, err := c.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, id.Bind(ap))
	require.NoError(t, id.Listen(4))
	require.Equal(t, ap, id.LocalAddr())
	return id, ch
}

// cmDial resolves dst, makes the ID's QP and connects with private data.
func cmDial(t *testing.T, c *rdmacm.CM, dst netip.AddrPort) (*cmConn, *rdmacm.EventChannel) {
	ch := c.NewEventChannel()
	id, err := c.CreateID(ch, rdmacm.PortSpaceTCP)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(netip.Addr{}, dst, time.Second))
	cmEvent(t, ch, rdmacm.EventAddrResolved)
	require.NoError(t, id.ResolveRoute(time.Second))
	cmEvent(t, ch, rdmacm.EventRouteResolved)
	conn := cmQP(t, id)
	require.NoError(t, id.Connect(&rdmacm.ConnParam{PrivateData: []byte("hello through the daemon"),
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))
	return conn, ch
}

// connectAndTalk connects cli's program to a listener of srv's on port,
// moves a SEND each way and an RDMA WRITE, and disconnects from the
// client's side.
func connectAndTalk(t *testing.T, cliCM, srvCM *rdmacm.CM, port uint16) {
	srvAddr := netip.AddrPortFrom(addrB, port)
	lid, lch := cmListen(t, srvCM, srvAddr)
	cli, cch := cmDial(t, cliCM, srvAddr)

	req := cmEvent(t, lch, rdmacm.EventConnectRequest)
	assert.Same(t, lid, req.Listen)
	assert.True(t, bytes.HasPrefix(req.Param.PrivateData, []byte("hello through the daemon")))
	assert.Equal(t, srvAddr, req.ID.LocalAddr())
	assert.Equal(t, cli.id.LocalAddr(), req.ID.PeerAddr())
	assert.Equal(t, addrA, req.ID.PeerAddr().Addr())
	srv := cmQP(t, req.ID)
	require.NoError(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))

	est := cmEvent(t, cch, rdmacm.EventEstablished)
	assert.True(t, bytes.HasPrefix(est.Param.PrivateData, []byte("welcome")))
	cmEvent(t, lch, rdmacm.EventEstablished)
	require.Equal(t, verbs.QPSRTS, cli.qp.State())
	require.Equal(t, verbs.QPSRTS, srv.qp.State())

	// An RDMA WRITE, then a SEND: the server's receive completion, which
	// comes after the WRITE landed, tells it the data is there.
	copy(cli.mr.Bytes()[100:], "written")
	require.NoError(t, cli.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cli.mr.SGE(100, 7)}, RemoteAddr: srv.mr.Addr() + 300, RKey: srv.mr.RKey()}))
	assert.Equal(t, verbs.WCRDMAWrite, cli.waitWC(t).Opcode)
	rdmacmtest.SendRecv(t, cli.q, srv.q, "ping", 20*time.Second)
	assert.Equal(t, "written", string(srv.mr.Bytes()[300:307]))
	rdmacmtest.SendRecv(t, srv.q, cli.q, "pong", 20*time.Second)

	require.NoError(t, cli.id.Disconnect())
	cmEvent(t, cch, rdmacm.EventDisconnected)
	cmEvent(t, lch, rdmacm.EventDisconnected)
	assert.Equal(t, verbs.QPSErr, cli.qp.State())
	assert.Equal(t, verbs.QPSErr, srv.qp.State())

	require.NoError(t, cli.id.Destroy())
	require.NoError(t, srv.id.Destroy())
	require.NoError(t, lid.Destroy())
	assert.Zero(t, cliCM.IDs())
	assert.Zero(t, srvCM.IDs())
}

// TestCMThroughDaemons connects two programs whose devices daemons serve,
// with rdmacm's remote mode on both sides.
func TestCMThroughDaemons(t *testing.T) {
	a, b := newCMSides(t, true, true)
	_, cliCM := a.program(t)
	_, srvCM := b.program(t)
	connectAndTalk(t, cliCM, srvCM, 7471)
	// Both sessions hold nothing of the connection any more.
	for _, s := range []*cmSide{a, b} {
		assertNoObjects(t, s.socket, "QP")
	}
}

// TestCMDaemonToInProcess connects a daemon's client to a listener in
// process, and an in-process client to a daemon's client listening.
func TestCMDaemonToInProcess(t *testing.T) {
	a, b := newCMSides(t, true, false)
	_, remoteCM := a.program(t)
	_, localCM := b.program(t)
	connectAndTalk(t, remoteCM, localCM, 7472)

	a, b = newCMSides(t, false, true)
	_, localCM = a.program(t)
	_, remoteCM = b.program(t)
	connectAndTalk(t, localCM, remoteCM, 7473)
}

// TestCMCallersQPsThroughDaemons is rping -q's exchange with both
// programs' IDs and QPs in daemons: cm_init_qp_attr, cm_establish, and a
// connect and an accept naming the session's QP.
func TestCMCallersQPsThroughDaemons(t *testing.T) {
	a, b := newCMSides(t, true, true)
	_, cliCM := a.program(t)
	_, srvCM := b.program(t)
	rdmacmtest.CallersQPs(t, cliCM, srvCM, netip.AddrPortFrom(addrB, 7191))
}

// TestCMRefusedThroughDaemon: connecting where nobody listens gives
// REJECTED with ErrRefused, as in process.
func TestCMRefusedThroughDaemon(t *testing.T) {
	a, b := newCMSides(t, true, true)
	_, cliCM := a.program(t)
	b.program(t)
	cli, cch := cmDial(t, cliCM, netip.AddrPortFrom(addrB, 7474))
	ev := cmEvent(t, cch, rdmacm.EventRejected)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrRefused)
	require.NoError(t, cli.id.Destroy())
	assert.Error(t, cli.id.Destroy(), "a second destroy")
}

// assertNoObjects checks that the daemon on socket has no object of its
// sessions left, kind naming what is checked.
func assertNoObjects(t *testing.T, socket, kind string) {
	t.Helper()
	m, err := hostsession.DialMonitor(socket)
	require.NoError(t, err)
	defer m.Close()
	require.Eventually(t, func() bool {
		r, err := m.Resources()
		require.NoError(t, err)
		return r.Total.QP == 0
	}, 20*time.Second, 10*time.Millisecond, "%s left in the daemon", kind)
}

// TestCMSessionKilledWithIDs ends a session that has a listener and a
// connected ID: the peer hears the disconnection, the daemon keeps
// nothing, and the port is free for the next session.
func TestCMSessionKilledWithIDs(t *testing.T) {
	_, b, c := establishThroughDaemons(t, 7475)

	require.NoError(t, c.srvDev.Close(), "the session ends with its IDs live")
	cmEvent(t, c.cch, rdmacm.EventDisconnected)
	assert.Equal(t, verbs.QPSErr, c.cli.qp.State())
	waitDaemonEmpty(t, b.socket)

	_, srvCM2 := b.program(t)
	cmListen(t, srvCM2, c.srvAddr) // the first session's listener is gone
}

// cmEstablished is a connection between a program of daemon a (the
// client) and one of daemon b, which listens on srvAddr with an ID of
// srvDev, a device of its own.
type cmEstablished struct {
	srvDev   *verbs.Device
	srvAddr  netip.AddrPort
	lid      *rdmacm.ID
	lch, cch *rdmacm.EventChannel
	req      rdmacm.Event // the connect request the server accepted
	cli, srv *cmConn
}

// establishThroughDaemons connects two programs through two daemons on
// port, and waits until both sides have their ESTABLISHED (else ending the
// server's session rejects the request rather than disconnect).
func establishThroughDaemons(t *testing.T, port uint16) (a, b *cmSide, c *cmEstablished) {
	a, b = newCMSides(t, true, true)
	_, cliCM := a.program(t)
	srvDev, err := client.DialDevice(b.socket)
	require.NoError(t, err)
	srvCM, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{srvDev}})
	require.NoError(t, err)
	c = &cmEstablished{srvDev: srvDev, srvAddr: netip.AddrPortFrom(addrB, port)}
	c.lid, c.lch = cmListen(t, srvCM, c.srvAddr)
	c.cli, c.cch = cmDial(t, cliCM, c.srvAddr)
	c.req = cmEvent(t, c.lch, rdmacm.EventConnectRequest)
	c.srv = cmQP(t, c.req.ID)
	require.NoError(t, c.req.ID.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}))
	cmEvent(t, c.cch, rdmacm.EventEstablished)
	cmEvent(t, c.lch, rdmacm.EventEstablished)
	return a, b, c
}

// waitDaemonEmpty waits until the daemon on socket has no session and no
// object left.
func waitDaemonEmpty(t *testing.T, socket string) {
	t.Helper()
	m, err := hostsession.DialMonitor(socket)
	require.NoError(t, err)
	defer m.Close()
	require.Eventually(t, func() bool {
		r, err := m.Resources()
		require.NoError(t, err)
		return r.Sessions == 0 && r.Total == (hostif.ResourceCounts{})
	}, 20*time.Second, 10*time.Millisecond)
}

// TestCMBadCommands sends the CM's commands out of order and with bad
// arguments: each gets its errno, and the session goes on.
func TestCMBadCommands(t *testing.T) {
	a, _ := newCMSides(t, true, true)
	c, err := hostsession.Dial(a.socket)
	require.NoError(t, err)
	defer c.Close()
	errno := func(err error) unix.Errno {
		t.Helper()
		var ce *hostsession.Error
		require.ErrorAs(t, err, &ce)
		return ce.Errno
	}
	_, err = c.CMCreateID(99, 0x0106, 0)
	assert.Equal(t, unix.ENOENT, errno(err), "no such channel")
	ch, err := c.CMCreateChannel()
	require.NoError(t, err)
	defer ch.File.Close()
	_, err = c.CMCreateID(ch.Handle, 0x0002, 0)
	assert.Equal(t, unix.EINVAL, errno(err), "IPoIB port space")
	id, err := c.CMCreateID(ch.Handle, 0x0106, 42)
	require.NoError(t, err)
	_, ok, err := c.CMGetEvent(ch.Handle)
	require.NoError(t, err)
	assert.False(t, ok, "no event yet")
	_, err = c.CMCreateQP(id, hostif.CreateQPRequest{PD: 1, SendCQ: 2, RecvCQ: 2, MaxSendWR: 1, MaxRecvWR: 1})
	assert.Equal(t, unix.EINVAL, errno(err), "a QP before the ID has a device")
	assert.Equal(t, unix.EINVAL, errno(c.CMConnect(hostif.CMConnParam{ID: id})), "connect before resolving")
	assert.Equal(t, unix.EINVAL, errno(c.CMConnect(hostif.CMConnParam{ID: id, PrivateLen: 1 << 20})), "private data longer than the body")
	assert.Equal(t, unix.EINVAL, errno(c.CMAccept(hostif.CMConnParam{ID: id})), "accept without a request")
	_, _, err = c.CMInitQPAttr(id, ibv.QPSRTR)
	assert.Equal(t, unix.EINVAL, errno(err), "RTR's attributes with no connection")
	_, _, err = c.CMInitQPAttr(id, ibv.QPSErr)
	assert.Equal(t, unix.EINVAL, errno(err), "attributes of a state the CM does not move to")
	_, _, err = c.CMInitQPAttr(id+100, ibv.QPSInit)
	assert.Equal(t, unix.ENOENT, errno(err), "no such ID")
	attr, mask, err := c.CMInitQPAttr(id, ibv.QPSInit)
	require.NoError(t, err)
	assert.Equal(t, ibv.QPSInit, attr.State)
	assert.NotZero(t, mask&ibv.QPAttrAccessFlags)
	assert.Equal(t, unix.EINVAL, errno(c.CMEstablish(id)), "establish with no connect response")
	assert.Equal(t, unix.EINVAL, errno(c.CMDetachQP(id)), "no QP to let go")
	assert.Equal(t, unix.ENOSYS, errno(c.CMSetOption(id, 1, 1)), "REUSEADDR")
	assert.Equal(t, unix.EINVAL, errno(c.CMSetOption(id, 3, 32)), "an ACK timeout above 31")
	assert.Equal(t, unix.EINVAL, errno(c.CMSetOption(id, 0, 256)), "a traffic class above 255")
	require.NoError(t, c.CMSetOption(id, 3, 18))
	assert.Equal(t, unix.ENOENT, errno(c.CMMigrateID(id, 99)), "no such channel")
	assert.Equal(t, unix.ENOENT, errno(c.CMMigrateID(id+100, ch.Handle)), "no such ID")
	require.NoError(t, c.CMMigrateID(id, ch.Handle))
	assert.Equal(t, unix.ENOENT, errno(c.CMDisconnect(id+100)))
	_, err = c.CMBind(id, netip.AddrPortFrom(addrB, 7000))
	assert.Equal(t, unix.EADDRNOTAVAIL, errno(err), "the peer's address is not the device's")
	_, err = c.CMListen(id, 1)
	require.NoError(t, err)

	// Another session cannot listen on the same port: the device's.
	c2, err := hostsession.Dial(a.socket)
	require.NoError(t, err)
	defer c2.Close()
	ch2, err := c2.CMCreateChannel()
	require.NoError(t, err)
	defer ch2.File.Close()
	id2, err := c2.CMCreateID(ch2.Handle, 0x0106, 0)
	require.NoError(t, err)
	addrs, err := c.CMQueryAddr(id)
	require.NoError(t, err)
	_, err = c2.CMBind(id2, netip.AddrPortFrom(addrA, addrs.Local.Port()))
	require.NoError(t, err)
	_, err = c2.CMListen(id2, 1)
	assert.Equal(t, unix.EADDRINUSE, errno(err))
	// Handles are the session's: with its own ID gone, the other's of the
	// same number is not found.
	require.Equal(t, id, id2)
	require.NoError(t, c2.CMDestroyID(id2))
	_, err = c2.CMQueryAddr(id)
	assert.Equal(t, unix.ENOENT, errno(err), "the other session's ID")

	require.NoError(t, c.CMDestroyID(id))
	assert.Equal(t, unix.ENOENT, errno(c.CMDestroyID(id)))
	_, err = c.QueryPort()
	require.NoError(t, err, "the session goes on")
}

// TestCMQPDestroyedUnderID: a program that destroys a connected ID's QP
// with ibv_destroy_qp rather than rdma_destroy_qp leaves the daemon an ID
// whose QP is gone: the peer's disconnect still reaches it, its commands
// go on, and the session's end leaves nothing.
func TestCMQPDestroyedUnderID(t *testing.T) {
	_, b, c := establishThroughDaemons(t, 7476)

	require.NoError(t, c.srv.qp.Destroy(), "ibv_destroy_qp under the ID")
	require.NoError(t, c.cli.id.Disconnect())
	cmEvent(t, c.cch, rdmacm.EventDisconnected)
	cmEvent(t, c.lch, rdmacm.EventDisconnected)
	require.NoError(t, c.req.ID.Disconnect(), "after the peer's, nothing to do")
	require.NoError(t, c.lid.Destroy())
	require.NoError(t, c.srvDev.Close())
	waitDaemonEmpty(t, b.socket)
}

// TestCMIBPortSpace: the IB port space (RDMA_PS_IB, XRC's) makes IDs, as
// TCP's and UDP's do.
func TestCMIBPortSpace(t *testing.T) {
	a, _ := newCMSides(t, true, true)
	c, err := hostsession.Dial(a.socket)
	require.NoError(t, err)
	defer c.Close()
	ch, err := c.CMCreateChannel()
	require.NoError(t, err)
	defer ch.File.Close()
	id, err := c.CMCreateID(ch.Handle, 0x013f, 0)
	require.NoError(t, err)
	require.NoError(t, c.CMDestroyID(id))
}
