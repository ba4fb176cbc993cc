package verbs_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// multiPair is two devices on an in-memory link of two queues: each side
// runs enginesA and enginesB engines (2 splits its link, 1 uses it whole).
type multiPair struct {
	a, b   *verbs.Device
	la, lb *memlink.MultiQueue
}

func newMultiPair(t testing.TB, cfg memlink.Config, enginesA, enginesB int) *multiPair {
	t.Helper()
	la, lb := memlink.PairQueues(cfg, 2)
	a, b := openPair(t, la, lb, verbs.Config{Engines: enginesA}, verbs.Config{Engines: enginesB})
	require.Equal(t, enginesA, a.RoCE().Engines())
	require.Equal(t, enginesB, b.RoCE().Engines())
	return &multiPair{a: a, b: b, la: la, lb: lb}
}

// exchange runs, on each of n connected QP pairs, a 64 KiB WRITE from a
// to b, a 4 KiB SEND from b to a and a 32 KiB READ by a of b's memory, and
// checks every byte. It returns a's endpoints.
func exchange(t *testing.T, p *multiPair, n int) []*endpoint {
	t.Helper()
	o := defaultOpts()
	o.mtu = verbs.MTU4096
	type conn struct {
		x, y                *endpoint
		xmr, ymr            *verbs.MR
		xbuf, ybuf          []byte
		recvMR              *verbs.MR
		recvBuf, wantRecv   []byte
		wantWrite, wantRead []byte
		readMR              *verbs.MR
		readBuf             []byte
	}
	conns := make([]*conn, n)
	var xs []*endpoint
	for i := range conns {
		c := &conn{x: newEndpoint(t, p.a, nil, o, nil), y: newEndpoint(t, p.b, nil, o, nil)}
		connect(t, c.x, c.y, o)
		c.xmr, c.xbuf = regMR(t, c.x.pd, 64<<10, allAccess)
		c.ymr, c.ybuf = regMR(t, c.y.pd, 128<<10, allAccess)
		c.recvMR, c.recvBuf = regMR(t, c.x.pd, 4<<10, allAccess)
		c.readMR, c.readBuf = regMR(t, c.x.pd, 32<<10, allAccess)
		fill(c.xbuf, byte(i))
		fill(c.ybuf, byte(i)^0x5a)
		c.wantWrite = bytes.Clone(c.xbuf)
		c.wantRecv = bytes.Clone(c.ybuf[:4<<10])
		c.wantRead = bytes.Clone(c.ybuf[96<<10:])
		conns[i] = c
		xs = append(xs, c.x)
	}
	for _, c := range conns {
		require.NoError(t, c.x.qp.PostRecv(&verbs.RecvWR{ID: 3, SGL: []verbs.SGE{c.recvMR.SGE(0, 4<<10)}}))
		require.NoError(t, c.x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{c.xmr.SGE(0, 64<<10)}, RemoteAddr: c.ymr.Addr() + 32<<10, RKey: c.ymr.RKey()}))
		require.NoError(t, c.x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{c.readMR.SGE(0, 32<<10)}, RemoteAddr: c.ymr.Addr() + 96<<10, RKey: c.ymr.RKey()}))
		require.NoError(t, c.y.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{c.ymr.SGE(0, 4<<10)}}))
	}
	for i, c := range conns {
		waitOK(t, c.x.scq, 1)
		waitOK(t, c.x.scq, 2)
		waitOK(t, c.y.scq, 4)
		wc := waitOK(t, c.x.rcq, 3)
		require.Equal(t, uint32(4<<10), wc.ByteLen)
		require.Equal(t, c.wantWrite, c.ybuf[32<<10:96<<10], "QP pair %d: WRITE", i)
		require.Equal(t, c.wantRecv, c.recvBuf, "QP pair %d: SEND", i)
		require.Equal(t, c.wantRead, c.readBuf, "QP pair %d: READ", i)
	}
	return xs
}

// Two engines a side: connections spread over both, and each stays on
// one engine on both ends, so that nothing needs forwarding.
func TestEnginesSpreadConnections(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	xs := exchange(t, p, 32)
	perEngine := [2]int{}
	for _, x := range xs {
		perEngine[x.qp.EngineIndex()]++
	}
	t.Logf("QPs per engine: %v", perEngine)
	require.NotZero(t, perEngine[0])
	require.NotZero(t, perEngine[1])
	for _, d := range []*verbs.Device{p.a, p.b} {
		for i, e := range d.RoCE().Group().Engines() {
			require.NotZero(t, e.Ctr.TxPackets.Load(), "engine %d sent nothing", i)
			require.NotZero(t, e.Ctr.RxPackets.Load(), "engine %d received nothing", i)
		}
		require.Zero(t, d.Counters().Forwarded.Load(), "a packet arrived at another engine than its QP's")
	}
	require.Equal(t, p.a.Counters().TxPackets.Load(),
		p.a.RoCE().Group().Engines()[0].Ctr.TxPackets.Load()+p.a.RoCE().Group().Engines()[1].Ctr.TxPackets.Load())
}

// A peer that sends every frame on one queue (here a device with one
// engine): the receiving engine forwards the packets of the other
// engine's QPs to it, and everything still arrives intact.
func TestEnginesForwardToTheQPsEngine(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 1)
	exchange(t, p, 16)
	require.NotZero(t, p.a.Counters().Forwarded.Load())
	// A full ring between engines drops, like a full receive ring; the
	// requester's retransmission recovers.
	t.Logf("forwarded %d packets, dropped %d", p.a.Counters().Forwarded.Load(), p.a.Counters().ForwardDrops.Load())
	require.Zero(t, p.a.Counters().RxNoQP.Load())
}

// A connected QP whose packets keep arriving at another engine (the
// peer's frames all come in on queue 0) moves to that engine with a
// stream of SENDs under way: every message arrives, in order, the
// responder never sees a gap, and after the move nothing is handed over.
func TestEnginesQPFollowsItsPackets(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 1)
	o := defaultOpts()
	o.timeout = 14 // 67 ms: no retransmission from a slow run (-race)
	var x, y *endpoint
	for range 64 { // until a connection lands on engine 1
		x, y = newEndpoint(t, p.a, nil, o, nil), newEndpoint(t, p.b, nil, o, nil)
		connect(t, x, y, o)
		if x.qp.EngineIndex() == 1 {
			break
		}
	}
	require.Equal(t, 1, x.qp.EngineIndex(), "no connection placed on engine 1")
	const msgs, size, batch = 200, 32, 50
	rmr, rbuf := regMR(t, x.pd, msgs*size, allAccess)
	smr, sbuf := regMR(t, y.pd, msgs*size, allAccess)
	stream := func() {
		clear(rbuf)
		for i := range msgs {
			require.NoError(t, x.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*size, size)}}))
			copy(sbuf[i*size:], fmt.Sprintf("message %d", i))
		}
		for i := range msgs {
			require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{smr.SGE(i*size, size)}}))
			if i%batch == batch-1 {
				for k := i - batch + 1; k <= i; k++ {
					waitOK(t, y.scq, uint64(k))
				}
			}
		}
		for i := range msgs {
			wc := waitOK(t, x.rcq, uint64(i))
			require.Equal(t, uint32(size), wc.ByteLen)
		}
		require.Equal(t, sbuf, rbuf)
	}
	stream()
	require.Equal(t, 0, x.qp.EngineIndex(), "the QP stayed on the engine its packets do not arrive at")
	require.Equal(t, uint64(1), p.a.RoCE().Group().Engines()[0].Ctr.Followed.Load())
	fwd := p.a.Counters().Forwarded.Load()
	t.Logf("forwarded %d of %d packets before the move", fwd, p.a.Counters().RxPackets.Load())
	stream()
	require.Equal(t, fwd, p.a.Counters().Forwarded.Load(), "packets handed over after the move")
	require.Zero(t, p.a.Counters().ForwardDrops.Load())
	require.Zero(t, p.a.Counters().RxOutOfSeq.Load(), "a packet overtook another around the move")
	require.Zero(t, p.b.Counters().Retransmits.Load())
}

// Loss, duplicates and reordering on both queues: every engine recovers
// its own QPs.
func TestEnginesUnderFaults(t *testing.T) {
	f := memlink.Faults{Loss: 0.02, Duplicate: 0.01, Reorder: 0.02}
	p := newMultiPair(t, memlink.Config{Seed: 7, AtoB: f, BtoA: f}, 2, 2)
	exchange(t, p, 16)
	require.NotZero(t, p.a.Counters().Retransmits.Load()+p.b.Counters().Retransmits.Load())
}

// QPs that share an SRQ share an engine, the SRQ ring's only consumer,
// whatever engines their connections would pick.
func TestEnginesSRQKeepsItsQPsTogether(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	o := defaultOpts()
	pd := p.a.AllocPD()
	srq, err := pd.NewSRQ(256, 1)
	require.NoError(t, err)
	recvMR, recvBuf := regMR(t, pd, 16*64, allAccess)
	for i := range 16 {
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{recvMR.SGE(i*64, 64)}}))
	}
	var ys []*endpoint
	engines := map[int]bool{}
	for range 16 {
		x := newEndpoint(t, p.a, pd, o, srq)
		y := newEndpoint(t, p.b, nil, o, nil)
		connect(t, x, y, o)
		engines[x.qp.EngineIndex()] = true
		ys = append(ys, y)
	}
	require.Len(t, engines, 1, "the SRQ's QPs are on several engines")
	for i, y := range ys {
		mr, buf := regMR(t, y.pd, 64, allAccess)
		copy(buf, fmt.Sprintf("message %d", i))
		require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 64)}}))
		waitOK(t, y.scq, 9)
	}
	got := map[string]bool{}
	for i := range 16 {
		got[string(bytes.TrimRight(recvBuf[i*64:(i+1)*64], "\x00"))] = true
	}
	require.Len(t, got, 16)
}

// Memory registration pauses every engine (Group.Do) while the others
// carry traffic, and deregistration then keeps them off the memory.
func TestEnginesRegisterDuringTraffic(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pd := p.b.AllocPD()
		for range 200 {
			mr, err := pd.RegMR(make([]byte, 4096), allAccess)
			if !assert.NoError(t, err) {
				return
			}
			if !assert.NoError(t, mr.Dereg()) {
				return
			}
		}
	}()
	exchange(t, p, 16)
	wg.Wait()
}

// With two engines a side, an application that polls drives the engine
// of its QPs in its own goroutine (the other engine, without QPs, is left
// to its goroutine): a ping-pong both sides run by polling their CQs.
func TestEnginesPolledPingPong(t *testing.T) {
	p := newMultiPair(t, memlink.Config{}, 2, 2)
	o := defaultOpts()
	x := newEndpoint(t, p.a, nil, o, nil)
	y := newEndpoint(t, p.b, nil, o, nil)
	connect(t, x, y, o)
	const rounds, size = 300, 100
	xmr, _ := regMR(t, x.pd, 2*size, verbs.AccessLocalWrite)
	ymr, _ := regMR(t, y.pd, 2*size, verbs.AccessLocalWrite)
	postRecv := func(e *endpoint, mr *verbs.MR) {
		require.NoError(t, e.qp.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{mr.SGE(size, size)}}))
	}
	send := func(e *endpoint, mr *verbs.MR) {
		require.NoError(t, e.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.SGE(0, size)}}))
	}
	postRecv(x, xmr)
	postRecv(y, ymr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range rounds {
			if wc := spin(t, y.rcq); !assert.Equal(t, verbs.WCSuccess, wc.Status, "receive") {
				return
			}
			postRecv(y, ymr)
			send(y, ymr)
		}
	}()
	for range rounds {
		send(x, xmr)
		require.Equal(t, verbs.WCSuccess, spin(t, x.rcq).Status)
		postRecv(x, xmr)
	}
	<-done
	require.NotZero(t, p.a.RoCE().Counters().PollPasses.Load())
	require.NotZero(t, p.b.RoCE().Counters().PollPasses.Load())
}
