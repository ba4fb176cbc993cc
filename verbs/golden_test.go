package verbs_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport"
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

func summarize(p *ibtransport.Packet) string {
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
		var p ibtransport.Packet
		require.NoError(t, ibtransport.ParsePacket(fr.IB, &p))
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
	var first ibtransport.PSN
	var base uint64
	var p ibtransport.Packet
	for i, raw := range c.requests {
		require.NoError(t, ibtransport.ParsePacket(raw, &p))
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
	drain := func() {
		// Collect answers until the device has been quiet for a while.
		for quiet := time.Now(); time.Since(quiet) < 5*time.Millisecond; {
			n := la.Receive(func(frame []byte) {
				var fr roce.Frame
				require.NoError(t, roce.ParseFrame(frame, &fr))
				var q ibtransport.Packet
				require.NoError(t, ibtransport.ParsePacket(fr.IB, &q))
				require.Equal(t, c.clientQPN, q.BTH.DestQPN())
				got = append(got, summarize(&q))
			}, 64)
			if n > 0 {
				quiet = time.Now()
			}
			la.Wait(time.Millisecond)
		}
	}
	for _, raw := range c.requests {
		buf := la.TxFrame()
		require.NotNil(t, buf)
		hl := encap.HeaderLen()
		n := copy(buf[hl:], raw)
		require.NoError(t, ibtransport.ParsePacket(buf[hl:hl+n], &p))
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
		drain()
	}
	return got
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
