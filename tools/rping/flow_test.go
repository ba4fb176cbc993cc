package rping

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// tapLink is a memlink end that keeps a copy of every frame it sends.
type tapLink struct {
	*memlink.Endpoint
	mu     *sync.Mutex
	frames *[][]byte
}

func (l tapLink) Send(frame []byte) {
	l.mu.Lock()
	*l.frames = append(*l.frames, append([]byte(nil), frame...))
	l.mu.Unlock()
	l.Endpoint.Send(frame)
}

// step is one message of an rping run as the flow test compares it: who
// sent it (c or s) and what, without the ACKs, whose coalescing is the
// transport's business.
func step(from string, p *header.Packet) string {
	if mad.ToGSI(p) {
		m, err := mad.Parse(p.Payload)
		if err != nil {
			return from + " bad MAD"
		}
		return fmt.Sprintf("%s MAD %#x", from, uint16(m.Header().AttrID()))
	}
	switch op := p.Opcode(); op {
	case header.OpRCAcknowledge:
		return ""
	case header.OpRCReadRequest, header.OpRCWriteOnly:
		return fmt.Sprintf("%s %v len=%d payload=%d", from, op, p.RETH.DMALength(), len(p.Payload))
	default:
		return fmt.Sprintf("%s %v payload=%d", from, op, len(p.Payload))
	}
}

// steps turns captured packets into steps; client is the client's
// address.
func steps(pkts []capturedPacket, client netip.Addr) []string {
	var out []string
	for _, c := range pkts {
		from := "s"
		if c.src == client {
			from = "c"
		}
		if s := step(from, &c.pkt); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TestFlowAsCaptured runs softnic's rping -C 2 -S 64 (as the capture's)
// and compares its messages, in order, with what two rdma_rxe hosts
// running the real rping exchanged (roce/testdata/rxe-rping.pcap): the
// CM's REQ, REP, RTU, then per ping SEND, READ request and response,
// SEND, SEND, WRITE, SEND, and the DREQ and DREP; and the data the READ
// fetched, byte for byte.
func TestFlowAsCaptured(t *testing.T) {
	var mu sync.Mutex
	var frames [][]byte
	la, lb := memlink.Pair(memlink.Config{})
	a4, b4 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	da, err := verbs.Open(tapLink{la, &mu, &frames}, verbs.Config{Addrs: []netip.Addr{a4}})
	require.NoError(t, err)
	db, err := verbs.Open(tapLink{lb, &mu, &frames}, verbs.Config{Addrs: []netip.Addr{b4}})
	require.NoError(t, err)
	defer func() { da.Close(); db.Close(); la.Close(); lb.Close() }()
	scm, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{da}})
	require.NoError(t, err)
	ccm, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{db}})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scfg, ccfg := serverConfig(), clientConfig()
	scfg.Addr, ccfg.Addr, ccfg.Count = a4, a4, 2
	waitServer := start(ctx, scm, scfg)
	waitListening(t, scm)
	cli := start(ctx, ccm, ccfg)()
	srv := waitServer()
	require.NoError(t, cli.err, "%v", cli)
	require.NoError(t, srv.err, "%v", srv)

	var ours []capturedPacket
	mu.Lock()
	for _, f := range frames {
		var fr roce.Frame
		require.NoError(t, roce.ParseFrame(f, &fr))
		c := capturedPacket{src: fr.Src.Unmap()}
		require.NoError(t, header.ParsePacket(fr.IB, &c.pkt))
		ours = append(ours, c)
	}
	mu.Unlock()
	theirs := readCapture(t, "../../roce/testdata/rxe-rping.pcap")
	want := steps(theirs, netip.MustParseAddr("10.77.0.12"))
	require.Len(t, want, 19, "the capture's messages")
	assert.Equal(t, want, steps(ours, b4))
	assert.Equal(t, readData(theirs), readData(ours), "the data the READs fetched")
}

// readData returns the payloads of the READ responses, joined.
func readData(pkts []capturedPacket) []byte {
	var b bytes.Buffer
	for _, c := range pkts {
		if c.pkt.Opcode() == header.OpRCReadResponseOnly {
			b.Write(c.pkt.Payload)
		}
	}
	return b.Bytes()
}
