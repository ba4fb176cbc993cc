package verbs_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// The golden captures were made between two Linux rdma_rxe guests (see
// roce/testdata/README.md): the client at .12 sends requests, the server at
// .11 answers.
var (
	goldenServer = netip.MustParseAddr("10.77.0.11")
	goldenClient = netip.MustParseAddr("10.77.0.12")
)

// goldenConn is one RC connection of a capture: the client's requests in
// the order the server saw them, and the server's responses.
type goldenConn struct {
	serverQPN, clientQPN uint32
	requests             [][]byte // IB packets
	responses            []string // summaries of rxe's responses
}

func summarize(p *header.Packet) string {
	s := fmt.Sprintf("%v psn %d len %d", p.BTH.Opcode(), p.BTH.PSN(), len(p.Payload))
	if p.AETH != nil {
		s += fmt.Sprintf(" syn %#x msn %d", uint8(p.AETH.Syndrome()), p.AETH.MSN())
	}
	return s
}

func loadGolden(t *testing.T, name string) []*goldenConn {
	f, err := os.Open("../roce/testdata/" + name)
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	require.NoError(t, err)
	var conns []*goldenConn
	byServer, byClient := map[uint32]*goldenConn{}, map[uint32]*goldenConn{}
	var pendingResp []*goldenConn // connections waiting to learn their client QPN
	for {
		pkt, err := rd.Next()
		if err != nil {
			break
		}
		var fr roce.Frame
		require.NoError(t, roce.ParseFrame(pkt.Data, &fr))
		var p header.Packet
		require.NoError(t, header.ParsePacket(fr.IB, &p))
		qpn := p.BTH.DestQPN()
		switch {
		case fr.Src == goldenClient:
			c := byServer[qpn]
			if c == nil {
				c = &goldenConn{serverQPN: qpn}
				byServer[qpn] = c
				conns = append(conns, c)
				pendingResp = append(pendingResp, c)
			}
			c.requests = append(c.requests, append([]byte(nil), fr.IB...))
		case fr.Src == goldenServer:
			c := byClient[qpn]
			if c == nil {
				require.NotEmpty(t, pendingResp, "response before any request")
				c, pendingResp = pendingResp[0], pendingResp[1:]
				c.clientQPN = qpn
				byClient[qpn] = c
			}
			c.responses = append(c.responses, summarize(&p))
		}
	}
	return conns
}

// replay sends a connection's requests, rewritten for our QP and memory, to
// a verbs device standing in for the rxe server, and returns summaries of
// what the device answered.
func replay(t *testing.T, c *goldenConn) []string {
	la, lb := memlink.Pair(memlink.Config{})
	dev, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{goldenServer}})
	require.NoError(t, err)
	defer func() { dev.Close(); la.Close(); lb.Close() }()

	// The first request PSN is the lowest one (PSNs of one capture do not
	// wrap); the base address the lowest remote address, page aligned.
	var first header.PSN
	var base uint64
	var p header.Packet
	for i, raw := range c.requests {
		require.NoError(t, header.ParsePacket(raw, &p))
		if i == 0 || p.BTH.PSN().Before(first) {
			first = p.BTH.PSN()
		}
		var va uint64
		switch {
		case p.RETH != nil:
			va = p.RETH.VA()
		case p.AtomicETH != nil:
			va = p.AtomicETH.VA()
		default:
			continue
		}
		if base == 0 || va&^0xfff < base {
			base = va &^ 0xfff
		}
	}
	o := defaultOpts()
	o.maxRd = 16
	o.recvWR = 256
	v := newEndpoint(t, dev, nil, o, nil)
	mr, _ := regMR(t, v.pd, 4<<20, allAccess)
	rmr, _ := regMR(t, v.pd, 256*8192, allAccess)
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: allAccess}, verbs.QPAttrState|verbs.QPAttrAccessFlags))
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: c.clientQPN, RQPSN: first,
		MaxDestRdAtomic: 16, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: roce.GIDFromAddr(goldenClient), HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	for i := range 256 {
		require.NoError(t, v.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rmr.SGE(i*8192, 8192)}}))
	}
	encap := roce.Encap{SrcMAC: la.HardwareAddr(), DstMAC: lb.HardwareAddr(), Src: goldenClient, Dst: goldenServer,
		HopLimit: 64, SrcPort: 0xc000}
	var got []string
	drain := func(idle time.Duration) {
		// Collect answers until the device has been quiet for a while. The
		// answers only depend on the order of the requests, so a slow
		// machine can at worst move some into the next drain.
		for quiet := time.Now(); time.Since(quiet) < idle; {
			n := la.Receive(func(frame []byte) {
				if frame == nil {
					return // the end of a batch
				}
				var fr roce.Frame
				require.NoError(t, roce.ParseFrame(frame, &fr))
				var q header.Packet
				require.NoError(t, header.ParsePacket(fr.IB, &q))
				require.Equal(t, c.clientQPN, q.BTH.DestQPN())
				got = append(got, summarize(&q))
			}, 64)
			if n > 0 {
				quiet = time.Now()
			}
			la.Wait(time.Millisecond)
		}
	}
	for i, raw := range c.requests {
		buf := la.TxFrame()
		require.NotNil(t, buf)
		hl := encap.HeaderLen()
		n := copy(buf[hl:], raw)
		require.NoError(t, header.ParsePacket(buf[hl:hl+n], &p))
		p.BTH.SetDestQPN(v.qp.QPN())
		switch {
		case p.RETH != nil:
			p.RETH.SetRKey(mr.RKey())
			p.RETH.SetVA(mr.Addr() + p.RETH.VA() - base)
		case p.AtomicETH != nil:
			p.AtomicETH.SetRKey(mr.RKey())
			p.AtomicETH.SetVA(mr.Addr() + p.AtomicETH.VA() - base)
		}
		l, err := encap.Finish(buf, n)
		require.NoError(t, err)
		la.Send(buf[:l])
		require.NoError(t, la.Flush())
		settle(t, dev, uint64(i+1))
		drain(2 * time.Millisecond)
	}
	drain(100 * time.Millisecond)
	return got
}

// settle waits until the engine of dev has received n packets and has
// finished the processing pass that answers them. rxe answered each captured
// request on its own; handing the engine the next request only then keeps a
// loaded machine from making it answer two at once (one cumulative ACK where
// rxe sent two), which is legal but not what the capture shows.
func settle(t *testing.T, dev *verbs.Device, n uint64) {
	deadline := time.Now().Add(10 * time.Second)
	for dev.Counters().RxPackets.Load() < n {
		require.True(t, time.Now().Before(deadline), "engine received %d of %d requests", dev.Counters().RxPackets.Load(), n)
		time.Sleep(20 * time.Microsecond)
	}
	// A command runs at the start of an engine pass, before the pass sends
	// responses; the second one runs only after the pass that received
	// packet n has sent what it answers.
	noop := func() error { return nil }
	require.NoError(t, dev.RoCE().Group().Do(noop))
	require.NoError(t, dev.RoCE().Group().Do(noop))
}

// TestGoldenRxeResponder replays the requests rdma_rxe clients sent in the
// golden captures, loss and reordering included, and checks that softnic
// answers exactly as the rxe server did: same opcodes, PSNs, lengths, ACK
// and NAK syndromes and MSNs.
func TestGoldenRxeResponder(t *testing.T) {
	for _, name := range []string{"rxe-send.pcap", "rxe-write.pcap", "rxe-read.pcap", "rxe-atomic-fadd.pcap",
		"rxe-atomic-cas.pcap", "rxe-write-loss.pcap", "rxe-send-reorder.pcap", "rxe-read-loss.pcap"} {
		t.Run(strings.TrimSuffix(name, ".pcap"), func(t *testing.T) {
			conns := loadGolden(t, name)
			require.NotEmpty(t, conns)
			// In rxe-read-loss netem dropped the server's own responses
			// before the capture point: the capture holds a subsequence of
			// what the server sent.
			lossy := name == "rxe-read-loss.pcap"
			for _, c := range conns {
				got := replay(t, c)
				if !lossy {
					require.Equal(t, strings.Join(c.responses, "\n"), strings.Join(got, "\n"),
						"connection to server QP %#x", c.serverQPN)
					continue
				}
				i := 0
				for _, g := range got {
					if i < len(c.responses) && g == c.responses[i] {
						i++
					}
				}
				require.Equal(t, len(c.responses), i, "rxe's responses are not a subsequence of ours:\nrxe:\n%s\nours:\n%s",
					strings.Join(c.responses, "\n"), strings.Join(got, "\n"))
				require.LessOrEqual(t, len(got)-len(c.responses), len(c.responses)/4, "far more responses than rxe sent")
			}
		})
	}
}

// requestSummary describes a request packet relative to the first PSN of
// its connection, for comparing requesters.
func requestSummary(p *header.Packet, first header.PSN) string {
	s := fmt.Sprintf("%v psn +%d ackreq %v len %d", p.BTH.Opcode(), p.BTH.PSN().Diff(first), p.BTH.AckReq(), len(p.Payload))
	if p.RETH != nil {
		s += fmt.Sprintf(" dmalen %d", p.RETH.DMALength())
	}
	if p.AtomicETH != nil {
		s += fmt.Sprintf(" swapadd %d compare %d", p.AtomicETH.SwapAdd(), p.AtomicETH.Compare())
	}
	return s
}

// TestGoldenRxeRequester posts the work requests the rxe clients of the
// loss-free golden captures posted, and checks that softnic's requester
// sends the same packets (opcodes, relative PSNs, AckReq bits, lengths) and
// completes every request on rxe's recorded responses.
func TestGoldenRxeRequester(t *testing.T) {
	for _, name := range []string{"rxe-send.pcap", "rxe-write.pcap", "rxe-read.pcap", "rxe-atomic-fadd.pcap", "rxe-atomic-cas.pcap"} {
		t.Run(strings.TrimSuffix(name, ".pcap"), func(t *testing.T) {
			for _, c := range loadGolden(t, name) {
				requesterReplay(t, name, c)
			}
		})
	}
}

func requesterReplay(t *testing.T, name string, c *goldenConn) {
	var p header.Packet
	require.NoError(t, header.ParsePacket(c.requests[0], &p))
	first := p.BTH.PSN()
	// The work requests, read back from the packets.
	var wrs []verbs.SendWR
	var want []string
	sendLen := 0
	for _, raw := range c.requests {
		require.NoError(t, header.ParsePacket(raw, &p))
		want = append(want, requestSummary(&p, first))
		oi := p.Info()
		switch oi.Kind {
		case header.KindSend:
			sendLen += len(p.Payload)
			if oi.Position == header.PositionLast || oi.Position == header.PositionOnly {
				wrs = append(wrs, verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Length: uint32(sendLen)}}})
				sendLen = 0
			}
		case header.KindWrite:
			if p.RETH != nil {
				wrs = append(wrs, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Length: p.RETH.DMALength()}}})
			}
		case header.KindReadRequest:
			wrs = append(wrs, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{{Length: p.RETH.DMALength()}}})
		case header.KindAtomicRequest:
			wr := verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGL: []verbs.SGE{{Length: 8}}, CompareAdd: p.AtomicETH.SwapAdd()}
			if p.BTH.Opcode() == header.OpRCCompareSwap {
				wr = verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{{Length: 8}},
					CompareAdd: p.AtomicETH.Compare(), Swap: p.AtomicETH.SwapAdd()}
			}
			wrs = append(wrs, wr)
		}
	}
	// Our device is the client; the test plays the rxe server from the
	// capture.
	la, lb := memlink.Pair(memlink.Config{})
	dev, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{goldenClient}})
	require.NoError(t, err)
	defer func() { dev.Close(); la.Close(); lb.Close() }()
	o := defaultOpts()
	v := newEndpoint(t, dev, nil, o, nil)
	mr, _ := regMR(t, v.pd, 1<<20, allAccess)
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: allAccess}, verbs.QPAttrState|verbs.QPAttrAccessFlags))
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: c.serverQPN, RQPSN: 1,
		MaxDestRdAtomic: 16, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: roce.GIDFromAddr(goldenServer), HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	require.NoError(t, v.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: first, Timeout: 20, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	off := 0
	for i := range wrs {
		wrs[i].ID = uint64(i)
		wrs[i].Flags = verbs.SendSignaled
		wrs[i].SGL[0] = mr.SGE(off, int(wrs[i].SGL[0].Length))
		off += int(wrs[i].SGL[0].Length)
		wrs[i].RemoteAddr, wrs[i].RKey = 0x10000, 0x1234
		require.NoError(t, v.qp.PostSend(&wrs[i]))
	}
	// Collect what our requester sends.
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for quiet := time.Now(); time.Now().Before(deadline) && (len(got) < len(want) || time.Since(quiet) < 20*time.Millisecond); {
		n := lb.Receive(func(frame []byte) {
			if frame == nil {
				return // the end of a batch
			}
			var fr roce.Frame
			require.NoError(t, roce.ParseFrame(frame, &fr))
			require.NoError(t, header.ParsePacket(fr.IB, &p))
			require.Equal(t, c.serverQPN, p.BTH.DestQPN())
			got = append(got, requestSummary(&p, first))
		}, 64)
		if n > 0 {
			quiet = time.Now()
		}
		lb.Wait(time.Millisecond)
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(got, "\n"), "%s: requests to server QP %#x", name, c.serverQPN)
	// Answer with rxe's responses, re-aimed at our QP.
	f, err := os.Open("../roce/testdata/" + name)
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	require.NoError(t, err)
	encap := roce.Encap{SrcMAC: lb.HardwareAddr(), DstMAC: la.HardwareAddr(), Src: goldenServer, Dst: goldenClient, HopLimit: 64, SrcPort: 0xc000}
	for {
		pkt, err := rd.Next()
		if err != nil {
			break
		}
		var fr roce.Frame
		require.NoError(t, roce.ParseFrame(pkt.Data, &fr))
		require.NoError(t, header.ParsePacket(fr.IB, &p))
		if fr.Src != goldenServer || p.BTH.DestQPN() != c.clientQPN {
			continue
		}
		buf := lb.TxFrame()
		hl := encap.HeaderLen()
		n := copy(buf[hl:], fr.IB)
		header.BTH(buf[hl:]).SetDestQPN(v.qp.QPN())
		l, err := encap.Finish(buf, n)
		require.NoError(t, err)
		lb.Send(buf[:l])
		require.NoError(t, lb.Flush())
	}
	for i := range wrs {
		wc := waitOK(t, v.scq, uint64(i))
		require.Equal(t, wcOpcode(wrs[i].Opcode), wc.Opcode)
	}
	noWC(t, v.scq)
}

func wcOpcode(op verbs.WROpcode) verbs.WCOpcode {
	switch op {
	case verbs.WRRDMAWrite:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRAtomicFetchAndAdd:
		return verbs.WCFetchAdd
	case verbs.WRAtomicCmpAndSwp:
		return verbs.WCCompSwap
	}
	return verbs.WCSend
}
