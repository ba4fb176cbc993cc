package verbs_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

// testPair is two devices joined by an in-memory link: a and b, which the
// test's endpoints use, and engA and engB, which run their transport (the
// same devices in-process; see mode).
type testPair struct {
	a, b       *verbs.Device
	engA, engB *verbs.Device
	la, lb     *memlink.Endpoint
	closers
}

func newPair(t testing.TB, cfg memlink.Config) *testPair {
	t.Helper()
	return newPairConfig(t, cfg, verbs.Config{})
}

// newPairConfig is newPair with both devices opened with dc (their
// addresses set here).
func newPairConfig(t testing.TB, cfg memlink.Config, dc verbs.Config) *testPair {
	t.Helper()
	return newPairMode(t, inProcess, cfg, dc)
}

// newPairMode is newPairConfig with the devices reached in mode m: through
// the daemon, each device is served by a daemon of its own.
func newPairMode(t testing.TB, m mode, cfg memlink.Config, dc verbs.Config) *testPair {
	t.Helper()
	la, lb := memlink.Pair(cfg)
	p := &testPair{la: la, lb: lb}
	t.Cleanup(p.close)
	p.add(func() { la.Close(); lb.Close() })
	p.a, p.engA = openMode(t, m, la, dc, addrA, &p.closers)
	p.b, p.engB = openMode(t, m, lb, dc, addrB, &p.closers)
	return p
}

// openPair opens devices on both ends of a link (addrA and addrB), and
// closes them and the links when the test ends.
func openPair(t testing.TB, la, lb roce.Link, dcA, dcB verbs.Config) (a, b *verbs.Device) {
	t.Helper()
	dcA.Addrs = []netip.Addr{addrA}
	a, err := verbs.Open(la, dcA)
	require.NoError(t, err)
	dcB.Addrs = []netip.Addr{addrB}
	b, err = verbs.Open(lb, dcB)
	require.NoError(t, err)
	t.Cleanup(func() {
		a.Close()
		b.Close()
		la.Close()
		lb.Close()
	})
	return a, b
}

// endpoint is one side's QP with its PD and CQs.
type endpoint struct {
	dev    *verbs.Device
	pd     *verbs.PD
	scq    *verbs.CQ
	rcq    *verbs.CQ
	qp     *verbs.QP
	gid    verbs.GID
	sqPSN  verbs.PSN
	access verbs.Access
}

type qpOpts struct {
	mtu             verbs.MTU
	timeout         uint8
	retry, rnrRetry uint8
	minRNR          uint8
	maxRd           uint8
	sendWR, recvWR  int
	sge             int
	inline          int
	srq             *verbs.SRQ
	access          verbs.Access
	psnA, psnB      verbs.PSN
}

func defaultOpts() qpOpts {
	return qpOpts{mtu: verbs.MTU1024, timeout: 8, retry: 7, rnrRetry: 7, minRNR: 1, maxRd: 16,
		sendWR: 256, recvWR: 256, sge: 32, inline: 256,
		access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		psnA:   0x123456, psnB: 0xabcdef}
}

func newEndpoint(t testing.TB, dev *verbs.Device, pd *verbs.PD, o qpOpts, srq *verbs.SRQ) *endpoint {
	t.Helper()
	if pd == nil {
		pd = dev.AllocPD()
	}
	scq, err := dev.CreateCQ(4*max(o.sendWR, 1), nil)
	require.NoError(t, err)
	rcq, err := dev.CreateCQ(4*max(o.recvWR, 64), nil)
	require.NoError(t, err)
	recvWR := o.recvWR
	if srq != nil {
		recvWR = 0
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, SRQ: srq, Cap: verbs.QPCap{
		MaxSendWR: o.sendWR, MaxRecvWR: recvWR, MaxSendSGE: o.sge, MaxRecvSGE: o.sge, MaxInlineData: o.inline}})
	require.NoError(t, err)
	gid, err := dev.GID(0)
	require.NoError(t, err)
	return &endpoint{dev: dev, pd: pd, scq: scq, rcq: rcq, qp: qp, gid: gid, access: o.access}
}

// connect moves both QPs through INIT and RTR to RTS, each aimed at the other.
func connect(t testing.TB, x, y *endpoint, o qpOpts) {
	t.Helper()
	x.sqPSN, y.sqPSN = o.psnA, o.psnB
	for _, me := range []*endpoint{x, y} {
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: me.access, Port: 1},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	}
	for _, s := range [][2]*endpoint{{x, y}, {y, x}} {
		me, peer := s[0], s[1]
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: o.mtu, DestQPN: peer.qp.QPN(),
			RQPSN: peer.sqPSN, MaxDestRdAtomic: o.maxRd, MinRNRTimer: o.minRNR,
			AV: verbs.AddressVector{DGID: peer.gid, HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	}
	for _, me := range []*endpoint{x, y} {
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: me.sqPSN, Timeout: o.timeout,
			RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.maxRd},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
				verbs.QPAttrMaxQPRdAtomic))
	}
}

// connectedPair returns two connected endpoints on a fresh link pair.
func connectedPair(t testing.TB, cfg memlink.Config, o qpOpts) (*testPair, *endpoint, *endpoint) {
	t.Helper()
	return connectedPairMode(t, inProcess, cfg, o)
}

// connectedPairMode is connectedPair with the devices reached in mode m.
func connectedPairMode(t testing.TB, m mode, cfg memlink.Config, o qpOpts) (*testPair, *endpoint, *endpoint) {
	t.Helper()
	p := newPairMode(t, m, cfg, verbs.Config{})
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	connect(t, x, y, o)
	return p, x, y
}

// waitWC waits for exactly one completion on cq.
func waitWC(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	n, err := cq.Wait(ctx, wc[:])
	require.NoError(t, err, "waiting for a completion")
	require.Equal(t, 1, n)
	return wc[0]
}

// waitOK waits for one successful completion with the given WR ID.
func waitOK(t testing.TB, cq *verbs.CQ, id uint64) verbs.WC {
	t.Helper()
	wc := waitWC(t, cq)
	require.Equal(t, verbs.WCSuccess, wc.Status, "completion %d: %v", wc.WRID, wc.Status)
	require.Equal(t, id, wc.WRID)
	return wc
}

// noWC checks that cq stays empty for a moment.
func noWC(t testing.TB, cq *verbs.CQ) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	var wc [1]verbs.WC
	n, err := cq.Poll(wc[:])
	require.NoError(t, err)
	require.Zero(t, n, "unexpected completion %+v", wc[0])
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+int(i>>8)*13) ^ seed
	}
}

// regMR registers n fresh bytes: from Device.AllocMemory on a device of
// the throughDaemonShared mode, from the Go heap otherwise.
func regMR(t testing.TB, pd *verbs.PD, n int, access verbs.Access) (*verbs.MR, []byte) {
	t.Helper()
	dev := pd.Device()
	if _, shared := sharedDevices.Load(dev); !shared {
		buf := make([]byte, n)
		mr, err := pd.RegMR(buf, access)
		require.NoError(t, err)
		return mr, buf
	}
	buf, err := dev.AllocMemory(max(n, 1))
	require.NoError(t, err)
	buf = buf[:n]
	mr, err := pd.RegMR(buf, access)
	require.NoError(t, err)
	t.Cleanup(func() {
		mr.Dereg() // may have been deregistered already
		dev.FreeMemory(buf)
	})
	return mr, buf
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
