package verbs_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

const udQKey = 0x11111111

// udEndpoint is a UD QP in RTS with a registered buffer of slots: receive
// i uses slot i, the send buffer is the last slot.
type udEndpoint struct {
	dev      *verbs.Device
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	mr       *verbs.MR
	buf      []byte
	slot     int
	gid      verbs.GID
}

func newUDEndpoint(t testing.TB, dev *verbs.Device, slots, slot int, qkey uint32) *udEndpoint {
	t.Helper()
	pd := dev.AllocPD()
	scq, err := dev.CreateCQ(1024, nil)
	require.NoError(t, err)
	rcq, err := dev.CreateCQ(1024, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, Type: verbs.QPTypeUD,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: slots, MaxInlineData: 64}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: qkey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x42}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	mr, buf := regMR(t, pd, (slots+1)*slot, allAccess)
	gid, err := dev.GID(0)
	require.NoError(t, err)
	return &udEndpoint{dev: dev, pd: pd, scq: scq, rcq: rcq, qp: qp, mr: mr, buf: buf, slot: slot, gid: gid}
}

// postRecvs posts receives into slots [from, to).
func (u *udEndpoint) postRecvs(t testing.TB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		require.NoError(t, u.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{
			{Addr: u.mr.Addr() + uint64(i*u.slot), Length: uint32(u.slot), LKey: u.mr.LKey()}}}))
	}
}

// send sends n bytes of the send slot to qpn through ah.
func (u *udEndpoint) send(t testing.TB, ah *verbs.AH, qpn, qkey uint32, id uint64, n int, op verbs.WROpcode, imm uint32) {
	t.Helper()
	off := len(u.buf) - u.slot
	require.NoError(t, u.qp.PostSend(&verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, Imm: imm,
		SGL: []verbs.SGE{{Addr: u.mr.Addr() + uint64(off), Length: uint32(n), LKey: u.mr.LKey()}},
		AH:  ah, RemoteQPN: qpn, RemoteQKey: qkey}))
}

func (u *udEndpoint) ahTo(t testing.TB, peer *udEndpoint) *verbs.AH {
	t.Helper()
	ah, err := u.pd.CreateAH(&verbs.AddressVector{DGID: peer.gid, HopLimit: 64})
	require.NoError(t, err)
	return ah
}

func udPair(t testing.TB, cfg memlink.Config) (*testPair, *udEndpoint, *udEndpoint) {
	t.Helper()
	return udPairMode(t, inProcess, cfg)
}

// udPairMode is udPair with the devices reached in mode m.
func udPairMode(t testing.TB, m mode, cfg memlink.Config) (*testPair, *udEndpoint, *udEndpoint) {
	t.Helper()
	p := newPairMode(t, m, cfg, verbs.Config{})
	return p, newUDEndpoint(t, p.a, 16, 1024+verbs.GRHLen, udQKey), newUDEndpoint(t, p.b, 16, 1024+verbs.GRHLen, udQKey)
}

func TestUDPingPong(t *testing.T) { forEachMode(t, testUDPingPong) }

func testUDPingPong(t *testing.T, m mode) {
	_, a, b := udPairMode(t, m, memlink.Config{})
	b.postRecvs(t, 0, 1)
	a.postRecvs(t, 0, 1)
	fill(a.buf[len(a.buf)-a.slot:], 1)
	a.send(t, a.ahTo(t, b), b.qp.QPN(), udQKey, 7, 512, verbs.WRSend, 0)
	wc := waitOK(t, a.scq, 7)
	assert.Equal(t, verbs.WCOpcode(verbs.WCSend), wc.Opcode)

	wc = waitOK(t, b.rcq, 0)
	assert.Equal(t, uint32(verbs.GRHLen+512), wc.ByteLen)
	assert.Equal(t, a.qp.QPN(), wc.SrcQP)
	assert.Equal(t, b.qp.QPN(), wc.QPN)
	assert.Equal(t, verbs.WCWithGRH, wc.Flags)
	assert.Equal(t, verbs.NetworkIPv4, wc.NetworkHdrType)
	assert.Zero(t, wc.PKeyIndex)
	assert.Equal(t, verbs.RoCEPacketIPv4, wc.SL, "the SL holds the RoCE packet type, as ConnectX's")
	assert.Zero(t, wc.DLIDPathBits)
	assert.Equal(t, a.buf[len(a.buf)-a.slot:][:512], b.buf[verbs.GRHLen:verbs.GRHLen+512])

	// The GRH: 20 zero bytes, then the IPv4 header as it came.
	grh := b.buf[:verbs.GRHLen]
	assert.Equal(t, make([]byte, 20), grh[:20])
	ip := grh[20:]
	assert.Equal(t, byte(0x45), ip[0])
	assert.Equal(t, uint16(20+8+12+8+512+4), binary.BigEndian.Uint16(ip[2:]), "IPv4 total length")
	assert.Equal(t, byte(64), ip[8], "TTL")
	assert.Equal(t, byte(17), ip[9], "UDP")
	assert.Equal(t, addrA.As4(), [4]byte(ip[12:16]))
	assert.Equal(t, addrB.As4(), [4]byte(ip[16:20]))

	// B answers with an AH made from the completion, with an immediate.
	ah, err := b.pd.CreateAHFromWC(&wc, grh)
	require.NoError(t, err)
	assert.Equal(t, a.gid, ah.AV().DGID)
	assert.Equal(t, uint8(64), ah.AV().HopLimit)
	b.send(t, ah, wc.SrcQP, udQKey, 8, 100, verbs.WRSendWithImm, 0xdeadbeef)
	waitOK(t, b.scq, 8)
	wc = waitOK(t, a.rcq, 0)
	assert.Equal(t, verbs.WCWithGRH|verbs.WCWithImm, wc.Flags)
	assert.Equal(t, uint32(0xdeadbeef), wc.Imm)
	assert.Equal(t, uint32(verbs.GRHLen+100), wc.ByteLen)
	assert.Equal(t, b.qp.QPN(), wc.SrcQP)
}

func TestUDGRHIPv6(t *testing.T) { forEachMode(t, testUDGRHIPv6) }

func testUDGRHIPv6(t *testing.T, m mode) {
	la, lb := memlink.Pair(memlink.Config{})
	a6, b6 := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	var cl closers
	t.Cleanup(cl.close)
	cl.add(func() { la.Close(); lb.Close() })
	da, _ := openMode(t, m, la, verbs.Config{}, a6, &cl)
	db, _ := openMode(t, m, lb, verbs.Config{}, b6, &cl)
	a := newUDEndpoint(t, da, 4, 1024+verbs.GRHLen, udQKey)
	b := newUDEndpoint(t, db, 4, 1024+verbs.GRHLen, udQKey)
	b.postRecvs(t, 0, 1)
	ah, err := a.pd.CreateAH(&verbs.AddressVector{DGID: b.gid, HopLimit: 9, TrafficClass: 0x20, FlowLabel: 0x12345})
	require.NoError(t, err)
	a.send(t, ah, b.qp.QPN(), udQKey, 1, 33, verbs.WRSend, 0)
	waitOK(t, a.scq, 1)
	wc := waitOK(t, b.rcq, 0)
	assert.Equal(t, verbs.NetworkIPv6, wc.NetworkHdrType)
	assert.Equal(t, verbs.RoCEPacketIPv6, wc.SL, "ConnectX's IPv6 packet type")
	assert.Equal(t, verbs.WCWithGRH, wc.Flags)
	assert.Equal(t, a.qp.QPN(), wc.SrcQP)
	assert.Zero(t, wc.PKeyIndex)
	grh := b.buf[:verbs.GRHLen]
	// The traffic class arrives with the ECN field the device set: ECT(0).
	assert.Equal(t, uint32(6<<28|0x22<<20|0x12345), binary.BigEndian.Uint32(grh))
	assert.Equal(t, uint16(8+12+8+36+4), binary.BigEndian.Uint16(grh[4:]), "payload length")
	assert.Equal(t, byte(17), grh[6])
	assert.Equal(t, byte(9), grh[7])
	assert.Equal(t, a6.As16(), [16]byte(grh[8:24]))
	assert.Equal(t, b6.As16(), [16]byte(grh[24:40]))
	av, err := db.InitAHFromWC(&wc, grh)
	require.NoError(t, err)
	assert.Equal(t, verbs.AddressVector{DGID: a.gid, HopLimit: 9, TrafficClass: 0x22, FlowLabel: 0x12345}, av)
}

func TestUDQKey(t *testing.T) { forEachMode(t, testUDQKey) }

func testUDQKey(t *testing.T, m mode) {
	p, a, b := udPairMode(t, m, memlink.Config{})
	b.postRecvs(t, 0, 2)
	ah := a.ahTo(t, b)
	a.send(t, ah, b.qp.QPN(), udQKey+1, 1, 10, verbs.WRSend, 0)
	waitOK(t, a.scq, 1)
	require.Eventually(t, func() bool { return p.engB.Counters().RxBadQKey.Load() == 1 }, 5*time.Second, time.Millisecond)
	noWC(t, b.rcq)
	// A Q_Key with the high bit set sends the QP's own: a's is udQKey.
	a.send(t, ah, b.qp.QPN(), 0x80000000, 2, 10, verbs.WRSend, 0)
	waitOK(t, a.scq, 2)
	waitOK(t, b.rcq, 0)
	assert.Equal(t, uint64(1), p.engB.Counters().RxBadQKey.Load())
}

func TestUDTooLongAndNoRecv(t *testing.T) {
	p := newPair(t, memlink.Config{}) // a 9000-byte link: the active MTU is 4096
	a := newUDEndpoint(t, p.a, 1, 4097, udQKey)
	b := newUDEndpoint(t, p.b, 1, 4096+verbs.GRHLen, udQKey)
	ah := a.ahTo(t, b)
	// Longer than the MTU: completed without an error, and no packet
	// leaves (IBA C10-93.1.1, as rxe).
	a.send(t, ah, b.qp.QPN(), udQKey, 1, 4097, verbs.WRSend, 0)
	waitOK(t, a.scq, 1)
	assert.Equal(t, uint64(1), p.a.Counters().TxUDTooLong.Load())
	assert.Zero(t, p.a.Counters().TxPackets.Load())
	// No receive posted: the datagram is dropped and counted.
	a.send(t, ah, b.qp.QPN(), udQKey, 2, 4096, verbs.WRSend, 0)
	waitOK(t, a.scq, 2)
	require.Eventually(t, func() bool { return p.b.Counters().RxNoRecv.Load() == 1 }, 5*time.Second, time.Millisecond)
	noWC(t, b.rcq)
	assert.Equal(t, verbs.QPSRTS, b.qp.State())
}

func TestUDRecvTooSmall(t *testing.T) { forEachMode(t, testUDRecvTooSmall) }

func testUDRecvTooSmall(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	a := newUDEndpoint(t, p.a, 4, 1024+verbs.GRHLen, udQKey)
	b := newUDEndpoint(t, p.b, 4, 100+verbs.GRHLen, udQKey)
	b.postRecvs(t, 0, 2)
	ah := a.ahTo(t, b)
	a.send(t, ah, b.qp.QPN(), udQKey, 1, 101, verbs.WRSend, 0)
	wc := waitWC(t, b.rcq)
	assert.Equal(t, verbs.WCLocLenErr, wc.Status)
	// The QP goes on (class D error).
	a.send(t, ah, b.qp.QPN(), udQKey, 2, 100, verbs.WRSend, 0)
	wc = waitOK(t, b.rcq, 1)
	assert.Equal(t, uint32(verbs.GRHLen+100), wc.ByteLen)
}

func TestUDPostAndModifyChecks(t *testing.T) { forEachMode(t, testUDPostAndModifyChecks) }

func testUDPostAndModifyChecks(t *testing.T, m mode) {
	_, a, b := udPairMode(t, m, memlink.Config{})
	ah := a.ahTo(t, b)
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSendWithInv, verbs.WRAtomicFetchAndAdd} {
		err := a.qp.PostSend(&verbs.SendWR{Opcode: op, AH: ah, RemoteQPN: b.qp.QPN()})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "%v", op)
	}
	require.ErrorIs(t, a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, RemoteQPN: 5}), verbs.ErrInvalidArgument, "no AH")
	require.NoError(t, ah.Destroy())
	if m == inProcess {
		// Through a daemon, AH.Destroy (the transport's method on its AH
		// type) does not reach verbs, which cannot refuse the AH then; the
		// daemon's AH goes once the *AH is dropped: verbs/remote_ah.go.
		require.ErrorIs(t, a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, AH: ah}), verbs.ErrInvalidArgument, "destroyed AH")
	}

	scq, err := a.dev.CreateCQ(4, nil)
	require.NoError(t, err)
	qp, err := a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	require.NoError(t, err)
	init := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
	require.ErrorIs(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, init), verbs.ErrInvalidArgument, "no Q_Key")
	require.ErrorIs(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, init|verbs.QPAttrQKey|verbs.QPAttrAccessFlags),
		verbs.ErrInvalidArgument, "access flags")
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: 5}, init|verbs.QPAttrQKey))
	require.ErrorIs(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, DestQPN: 3}, verbs.QPAttrState|verbs.QPAttrDestQPN),
		verbs.ErrInvalidArgument, "dest QPN")
	require.ErrorIs(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState|verbs.QPAttrAV), verbs.ErrInvalidArgument, "AV")
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, QKey: 6}, verbs.QPAttrState|verbs.QPAttrQKey))
	require.ErrorIs(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState), verbs.ErrInvalidArgument, "no SQ PSN")
	require.ErrorIs(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout),
		verbs.ErrInvalidArgument, "timeout")
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	assert.Equal(t, uint32(6), qp.Query().QKey)
	require.NoError(t, qp.Destroy())
}

// TestUDLoss loses a third of the datagrams: every send completes, the
// receiver gets the rest, and nothing waits for what was lost.
func TestUDLoss(t *testing.T) {
	const n = 300
	p, a, b := udPair(t, memlink.Config{AtoB: memlink.Faults{Loss: 0.3}, Seed: 3})
	b.postRecvs(t, 0, 16)
	ah := a.ahTo(t, b)
	got := 0
	var wc [16]verbs.WC
	for i := range n {
		a.send(t, ah, b.qp.QPN(), udQKey, uint64(i), 64, verbs.WRSend, 0)
		waitOK(t, a.scq, uint64(i))
		k, err := b.rcq.Poll(wc[:])
		require.NoError(t, err)
		for _, c := range wc[:k] {
			require.Equal(t, verbs.WCSuccess, c.Status)
			b.postRecvs(t, int(c.WRID), int(c.WRID)+1)
		}
		got += k
	}
	require.Eventually(t, func() bool {
		k, _ := b.rcq.Poll(wc[:])
		for _, c := range wc[:k] {
			b.postRecvs(t, int(c.WRID), int(c.WRID)+1)
		}
		got += k
		st := p.la.Stats()
		return st.Delivered.Load()+st.Lost.Load() == n && uint64(got) == st.Delivered.Load()
	}, 5*time.Second, time.Millisecond, "every datagram received or lost on the link")
	lost := p.la.Stats().Lost.Load()
	assert.Greater(t, lost, uint64(n/10))
	assert.Zero(t, p.b.Counters().RxNoRecv.Load())
}

// TestUDFanIn has 8 UD QPs send to one receiver with fewer receives than
// messages: every message is received or counted as dropped for lack of a
// receive.
func TestUDFanIn(t *testing.T) {
	const senders, each, recvs = 8, 100, 300
	p := newPair(t, memlink.Config{})
	b := newUDEndpoint(t, p.b, recvs, 64+verbs.GRHLen, udQKey)
	b.postRecvs(t, 0, recvs)
	var qpns []uint32
	done := make(chan *udEndpoint, senders)
	for range senders {
		a := newUDEndpoint(t, p.a, 1, 64, udQKey)
		qpns = append(qpns, a.qp.QPN())
		ah := a.ahTo(t, b)
		go func() {
			// Not a.send: require must not stop a goroutine of its own.
			for i := range each {
				assert.NoError(t, a.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{a.mr.SGE(64, 64)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey}))
			}
			done <- a
		}()
	}
	for range senders {
		a := <-done
		for i := range each {
			waitOK(t, a.scq, uint64(i))
		}
	}
	from := map[uint32]int{}
	var wc [64]verbs.WC
	require.Eventually(t, func() bool {
		k, err := b.rcq.Poll(wc[:])
		require.NoError(t, err)
		for _, c := range wc[:k] {
			require.Equal(t, verbs.WCSuccess, c.Status)
			from[c.SrcQP]++
		}
		received := 0
		for _, v := range from {
			received += v
		}
		return uint64(received)+p.b.Counters().RxNoRecv.Load() == senders*each
	}, 10*time.Second, time.Millisecond)
	for q := range from {
		assert.Contains(t, qpns, q)
	}
	assert.Equal(t, uint64(senders*each-recvs), p.b.Counters().RxNoRecv.Load())
}

// srqOnEngine1 returns a PD of p's end B and an SRQ in it on engine 1 of
// two: the first QP of an SRQ decides its engine, so it connects RC QPs
// on fresh SRQs until one lands there.
func srqOnEngine1(t *testing.T, p *multiPair, o qpOpts) (*verbs.PD, *verbs.SRQ) {
	t.Helper()
	for i := 0; ; i++ {
		require.Less(t, i, 64, "no RC QP landed on engine 1")
		pd := p.b.AllocPD()
		srq, err := pd.NewSRQ(64, 1)
		require.NoError(t, err)
		y := newEndpoint(t, p.b, pd, o, srq)
		connect(t, newEndpoint(t, p.a, nil, o, nil), y, o)
		if y.qp.EngineIndex() == 1 {
			return pd, srq
		}
	}
}

// TestUDSharedSRQMultiEngine gives a UD QP the SRQ of an RC QP placed on
// engine 1 of two: the UD QP joins it there, and datagrams that arrive at
// engine 0 are forwarded to it and fill the SRQ's receives behind a GRH.
func TestUDSharedSRQMultiEngine(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	o := defaultOpts()
	pd, srq := srqOnEngine1(t, p, o)
	cq, err := p.b.CreateCQ(64, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 4}})
	require.NoError(t, err)
	require.Equal(t, 1, qp.EngineIndex(), "the UD QP is on its SRQ's engine")
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: udQKey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
	mr, buf := regMR(t, pd, 8*128, allAccess)
	for i := range 8 {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*128, 128)}}))
	}
	a := newUDEndpoint(t, p.a, 1, 64, udQKey)
	require.Equal(t, 0, a.qp.EngineIndex())
	gid, err := p.b.GID(0)
	require.NoError(t, err)
	ah, err := a.pd.CreateAH(&verbs.AddressVector{DGID: gid, HopLimit: 64})
	require.NoError(t, err)
	for i := range 8 {
		fill(a.buf[64:], byte(i))
		a.send(t, ah, qp.QPN(), udQKey, uint64(i), 64, verbs.WRSend, 0)
		waitOK(t, a.scq, uint64(i))
		wc := waitOK(t, cq, uint64(i))
		assert.Equal(t, a.qp.QPN(), wc.SrcQP)
		assert.Equal(t, a.buf[64:], buf[i*128+verbs.GRHLen:i*128+verbs.GRHLen+64])
	}
	assert.NotZero(t, p.b.Counters().Forwarded.Load(), "datagrams forwarded from engine 0")
}

// TestUDLoopback sends datagrams between two UD QPs of one device: they
// never reach the link, and still arrive behind the GRH a link would have
// given them.
func TestUDLoopback(t *testing.T) {
	p := newPair(t, memlink.Config{})
	a := newUDEndpoint(t, p.a, 2, 256+verbs.GRHLen, udQKey)
	b := newUDEndpoint(t, p.a, 2, 256+verbs.GRHLen, udQKey)
	b.postRecvs(t, 0, 1)
	ah, err := a.pd.CreateAH(&verbs.AddressVector{DGID: b.gid, HopLimit: 5, TrafficClass: 8})
	require.NoError(t, err)
	a.send(t, ah, b.qp.QPN(), udQKey, 1, 200, verbs.WRSendWithImm, 9)
	waitOK(t, a.scq, 1)
	wc := waitOK(t, b.rcq, 0)
	assert.Equal(t, a.qp.QPN(), wc.SrcQP)
	assert.Equal(t, uint32(9), wc.Imm)
	ip := b.buf[20:verbs.GRHLen]
	assert.Equal(t, byte(0x45), ip[0])
	assert.Equal(t, byte(8|2), ip[1], "TOS: the AH's DSCP, ECT(0)")
	assert.Equal(t, uint16(20+8+12+8+4+200+4), binary.BigEndian.Uint16(ip[2:]))
	assert.Equal(t, byte(5), ip[8], "TTL")
	assert.Equal(t, addrA.As4(), [4]byte(ip[12:16]))
	assert.Equal(t, addrA.As4(), [4]byte(ip[16:20]))
	assert.Zero(t, p.la.Stats().Sent.Load(), "loopback reached the link")
	av, err := p.a.InitAHFromWC(&wc, b.buf[:verbs.GRHLen])
	require.NoError(t, err)
	assert.Equal(t, verbs.AddressVector{DGID: a.gid, HopLimit: 5, TrafficClass: 8 | 2}, av)
}
