package verbs_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

var (
	rawMACA  = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	rawMACB  = [6]byte{0x02, 0, 0, 0, 0, 0xb}
	rawGroup = [6]byte{0x01, 0x50, 0x56, 0x19, 0x20, 0xa7}
)

// rawEndpoint is a raw packet QP in RTS with a buffer of slots: receive
// i uses slot i, sends the last slot.
type rawEndpoint struct {
	qp   *verbs.QP
	cq   *verbs.CQ
	mr   *verbs.MR
	buf  []byte
	slot int
}

func newRawEndpoint(t *testing.T, dev *verbs.Device, slots, slot int) *rawEndpoint {
	t.Helper()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(256, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Type: verbs.QPTypeRawPacket,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: slots}})
	require.NoError(t, err)
	require.Error(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.QPAttrState), "INIT needs the port")
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort))
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState))
	mr, buf := regMR(t, pd, (slots+1)*slot, verbs.AccessLocalWrite)
	r := &rawEndpoint{qp: qp, cq: cq, mr: mr, buf: buf, slot: slot}
	for i := range slots {
		require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{
			{Addr: mr.Addr() + uint64(i*slot), Length: uint32(slot), LKey: mr.LKey()}}}))
	}
	return r
}

// send sends frame from the send slot and waits for its completion.
func (r *rawEndpoint) send(t *testing.T, frame []byte) {
	t.Helper()
	off := len(r.buf) - r.slot
	copy(r.buf[off:], frame)
	require.NoError(t, r.qp.PostSend(&verbs.SendWR{ID: 1000, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: r.mr.Addr() + uint64(off), Length: uint32(len(frame)), LKey: r.mr.LKey()}}}))
	waitOK(t, r.cq, 1000)
}

// udpFrame builds an Ethernet/IPv4/UDP frame to dst, port dport, with
// payload bytes of seed.
func udpFrame(dst, src [6]byte, dport uint16, seed byte) []byte {
	f := make([]byte, 14+20+8+32)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	copy(ip[12:16], []byte{1, 1, 1, 1})
	copy(ip[16:20], []byte{2, 2, 2, 2})
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 1234)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	fill(udp[8:], seed)
	return f
}

// portFlow takes the UDP frames to dst with destination port dport.
func portFlow(dst [6]byte, dport uint16) *verbs.FlowAttr {
	all := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	return &verbs.FlowAttr{Port: 1, Specs: []verbs.FlowSpec{
		{Type: verbs.FlowSpecEth, Eth: verbs.EthFilter{DstMAC: dst, EtherType: 0x0800},
			EthMask: verbs.EthFilter{DstMAC: all, EtherType: 0xffff}},
		{Type: verbs.FlowSpecUDP, Port: verbs.PortFilter{DstPort: dport}, PortMask: verbs.PortFilter{DstPort: 0xffff}},
	}}
}

// A flow takes the frames that match it, from the link and from the
// device's own raw QPs (loopback), and no others; a QP with flows is
// not destroyed.
func TestRawPacketFlows(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{MACA: rawMACA, MACB: rawMACB}, verbs.Config{})
		tx := newRawEndpoint(t, p.a, 4, 256)
		local := newRawEndpoint(t, p.a, 4, 256)
		rx := newRawEndpoint(t, p.b, 4, 256)
		flow, err := rx.qp.CreateFlow(portFlow(rawMACB, 5678))
		require.NoError(t, err)
		lflow, err := local.qp.CreateFlow(portFlow(rawGroup, 5678))
		require.NoError(t, err)

		tx.send(t, udpFrame(rawMACB, rawMACA, 9999, 1)) // no flow takes it
		want := udpFrame(rawMACB, rawMACA, 5678, 2)
		tx.send(t, want)
		wc := waitOK(t, rx.cq, 0)
		require.Equal(t, verbs.WCRecv, wc.Opcode)
		require.Equal(t, uint32(len(want)), wc.ByteLen)
		require.Equal(t, want, rx.buf[:len(want)], "the whole frame, as sent")
		noWC(t, rx.cq)
		noWC(t, local.cq)

		group := udpFrame(rawGroup, rawMACA, 5678, 3)
		tx.send(t, group)
		wc = waitOK(t, local.cq, 0)
		require.Equal(t, group, local.buf[:wc.ByteLen], "looped back to the device's flow")
		noWC(t, rx.cq) // B's flow wants B's MAC

		require.ErrorIs(t, rx.qp.Destroy(), verbs.ErrBusy)
		require.NoError(t, flow.Destroy())
		require.NoError(t, lflow.Destroy())
		tx.send(t, udpFrame(rawMACB, rawMACA, 5678, 4))
		noWC(t, rx.cq)
		require.NoError(t, rx.qp.Destroy())
	})
}

// Flows are for raw packet QPs; bad specs are refused.
func TestRawPacketFlowChecks(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{MACA: rawMACA, MACB: rawMACB}, verbs.Config{})
		x := newEndpoint(t, p.a, nil, defaultOpts(), nil)
		_, err := x.qp.CreateFlow(portFlow(rawMACB, 1))
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		r := newRawEndpoint(t, p.a, 1, 128)
		_, err = r.qp.CreateFlow(&verbs.FlowAttr{Port: 1, Specs: []verbs.FlowSpec{{Type: 0x99}}})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		_, err = r.qp.CreateFlow(&verbs.FlowAttr{Port: 2})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		short := make([]byte, 10)
		off := len(r.buf) - r.slot
		copy(r.buf[off:], short)
		require.NoError(t, r.qp.PostSend(&verbs.SendWR{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: r.mr.Addr() + uint64(off), Length: 10, LKey: r.mr.LKey()}}}))
		wc := waitWC(t, r.cq)
		require.Equal(t, verbs.WCLocLenErr, wc.Status, "shorter than an Ethernet header")
	})
}

// An RSS QP's flow spreads the frames it takes over its table's QPs by
// the Toeplitz hash of their IPv4 addresses, each frame to one QP.
func TestRSSFlow(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{MACA: rawMACA, MACB: rawMACB}, verbs.Config{})
		tx := newRawEndpoint(t, p.a, 1, 256)
		wqs := []*rawEndpoint{newRawEndpoint(t, p.b, 32, 128), newRawEndpoint(t, p.b, 32, 128)}
		pd := p.b.AllocPD()
		cq, err := p.b.CreateCQ(4, nil)
		require.NoError(t, err)
		a := &verbs.RSSQPInitAttr{Table: []*verbs.QP{wqs[0].qp, wqs[1].qp, wqs[0].qp, wqs[1].qp},
			HashFields: verbs.RxHashSrcIPv4 | verbs.RxHashDstIPv4, CQ: cq}
		for i := range a.HashKey {
			a.HashKey[i] = byte(i*37 + 11)
		}
		_, err = pd.CreateRSSQP(&verbs.RSSQPInitAttr{Table: a.Table[:3], CQ: cq})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "a table of 3")
		rss, err := pd.CreateRSSQP(a)
		require.NoError(t, err)
		require.True(t, rss.IsRSS())
		flow, err := rss.CreateFlow(portFlow(rawMACB, 5678))
		require.NoError(t, err)
		const n = 32
		for i := range n {
			f := udpFrame(rawMACB, rawMACA, 5678, byte(i))
			f[14+12] = byte(i) // the source address
			tx.send(t, f)
		}
		got := [2]int{}
		deadline := time.Now().Add(20 * time.Second)
		for got[0]+got[1] < n {
			require.True(t, time.Now().Before(deadline), "completions: %v of %d", got, n)
			for j, w := range wqs {
				var wc [8]verbs.WC
				k, err := w.cq.Poll(wc[:])
				require.NoError(t, err)
				for _, c := range wc[:k] {
					require.Equal(t, verbs.WCSuccess, c.Status)
				}
				got[j] += k
			}
		}
		require.Equal(t, n, got[0]+got[1])
		require.NotZero(t, got[0], "both queues take some: %v", got)
		require.NotZero(t, got[1], "both queues take some: %v", got)
		noWC(t, wqs[0].cq)
		noWC(t, wqs[1].cq)
		require.NoError(t, flow.Destroy())
	})
}

// A work queue in an RSS QP's table is busy until the RSS QP goes.
func TestRSSTableQPBusy(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{MACA: rawMACA, MACB: rawMACB}, verbs.Config{})
		w := newRawEndpoint(t, p.b, 1, 128)
		pd := p.b.AllocPD()
		cq, err := p.b.CreateCQ(4, nil)
		require.NoError(t, err)
		rss, err := pd.CreateRSSQP(&verbs.RSSQPInitAttr{Table: []*verbs.QP{w.qp, w.qp}, CQ: cq,
			HashFields: verbs.RxHashSrcIPv4})
		require.NoError(t, err)
		require.ErrorIs(t, w.qp.Destroy(), verbs.ErrBusy)
		require.NoError(t, rss.Destroy())
		require.NoError(t, w.qp.Destroy())
	})
}

// A raw packet QP on engine 1 of two (on an SRQ there) gets the frames
// its flow takes at engine 0, forwarded, into the SRQ's receives.
func TestRawPacketFlowMultiEngine(t *testing.T) {
	p := newMultiPair(t, memlink.Config{MACA: rawMACA, MACB: rawMACB}, 2, 2)
	pd, srq := srqOnEngine1(t, p, defaultOpts())
	cq, err := p.b.CreateCQ(16, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, Type: verbs.QPTypeRawPacket,
		Cap: verbs.QPCap{MaxSendWR: 1}})
	require.NoError(t, err)
	require.Equal(t, 1, qp.EngineIndex())
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort))
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
	mr, buf := regMR(t, pd, 4*256, verbs.AccessLocalWrite)
	for i := range 4 {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{mr.SGE(i*256, 256)}}))
	}
	flow, err := qp.CreateFlow(portFlow(rawMACB, 5678))
	require.NoError(t, err)
	defer flow.Destroy()
	tx := newRawEndpoint(t, p.a, 1, 256)
	require.Equal(t, 0, tx.qp.EngineIndex())
	forwarded := p.b.Counters().Forwarded.Load()
	want := udpFrame(rawMACB, rawMACA, 5678, 9)
	tx.send(t, want)
	wc := waitWC(t, cq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, qp.QPN(), wc.QPN)
	off := int(wc.WRID-100) * 256
	require.Equal(t, want, buf[off:off+int(wc.ByteLen)])
	require.Equal(t, forwarded+1, p.b.Counters().Forwarded.Load(), "engine 0 handed it to engine 1")
}

// A raw packet QP's completions carry timestamps on a CQ made with them:
// the send's when its frame left, the receive's when its frame came.
func TestRawPacketTimestamps(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{MACA: rawMACA, MACB: rawMACB}, verbs.Config{})
		ts := func(d *verbs.Device) *rawEndpoint {
			cq, err := d.CreateCQEx(verbs.CQInitAttr{CQE: 8, Timestamps: true})
			require.NoError(t, err)
			pd := d.AllocPD()
			qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Type: verbs.QPTypeRawPacket,
				Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
			require.NoError(t, err)
			require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort))
			require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
			require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState))
			mr, buf := regMR(t, pd, 2*256, verbs.AccessLocalWrite)
			require.NoError(t, qp.PostRecv(&verbs.RecvWR{ID: 0, SGL: []verbs.SGE{mr.SGE(0, 256)}}))
			return &rawEndpoint{qp: qp, cq: cq, mr: mr, buf: buf, slot: 256}
		}
		tx, rx := ts(p.a), ts(p.b)
		_, err := rx.qp.CreateFlow(portFlow(rawMACB, 5678))
		require.NoError(t, err)
		before := p.a.Clock()
		off := len(tx.buf) - tx.slot
		f := udpFrame(rawMACB, rawMACA, 5678, 5)
		copy(tx.buf[off:], f)
		require.NoError(t, tx.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: tx.mr.Addr() + uint64(off), Length: uint32(len(f)), LKey: tx.mr.LKey()}}}))
		sent := waitOK(t, tx.cq, 9)
		recv := waitOK(t, rx.cq, 0)
		after := p.b.Clock()
		require.LessOrEqual(t, before, sent.Timestamp, "stamped after the post")
		require.LessOrEqual(t, sent.Timestamp, recv.Timestamp, "the frame came after it left")
		require.LessOrEqual(t, recv.Timestamp, after)
	})
}
