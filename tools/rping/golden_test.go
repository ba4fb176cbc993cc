package rping

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce/rocetest"
)

// capturedPacket is one RoCEv2 packet of a capture: who sent it, and its
// transport headers and payload.
type capturedPacket struct {
	src netip.Addr
	pkt header.Packet
}

// readCapture returns the RoCEv2 packets of a pcap file, in order.
func readCapture(t *testing.T, path string) []capturedPacket {
	t.Helper()
	pkts, err := rocetest.ReadFile(path)
	require.NoError(t, err)
	out := make([]capturedPacket, len(pkts))
	for i, p := range pkts {
		out[i] = capturedPacket{src: p.Frame.Src.Unmap(), pkt: p.IB}
	}
	return out
}

// TestCapturedRping holds this package's rping to the real one, as Linux
// rdma_rxe carried it (roce/testdata/rxe-rping.pcap: rping -s/-c -C 2 -S
// 64 -v): the REQ's and REP's connection parameters; per ping the
// client's two advertisements, the server's READ and WRITE aimed at them
// with this package's lengths, the data byte for byte as fillPing makes
// it, and go-aheads of 16 zero bytes.
func TestCapturedRping(t *testing.T) {
	pkts := readCapture(t, "../../roce/testdata/rxe-rping.pcap")
	client := netip.MustParseAddr("10.77.0.12")
	var sends, reads, writes, goAheads [][]byte
	var readRETH, writeRETH []header.RETH
	var readResponses [][]byte
	for _, c := range pkts {
		p := &c.pkt
		switch op := p.Opcode(); {
		case mad.ToGSI(p):
			checkCapturedMAD(t, p.Payload)
		case op == header.OpRCSendOnly && c.src == client:
			sends = append(sends, p.Payload)
		case op == header.OpRCSendOnly:
			goAheads = append(goAheads, p.Payload)
		case op == header.OpRCReadRequest:
			readRETH = append(readRETH, p.RETH)
			reads = append(reads, nil)
		case op == header.OpRCReadResponseOnly:
			readResponses = append(readResponses, p.Payload)
		case op == header.OpRCWriteOnly:
			writeRETH = append(writeRETH, p.RETH)
			writes = append(writes, p.Payload)
		}
	}
	require.Len(t, sends, 4, "the client's advertisements")
	require.Len(t, goAheads, 4)
	require.Len(t, reads, 2)
	require.Len(t, writes, 2)
	buf := make([]byte, DefaultSize)
	start := byte(firstLetter)
	for ping := range 2 {
		fillPing(buf, ping, start)
		start = nextLetter(start)
		src, sink := parseInfo(sends[2*ping]), parseInfo(sends[2*ping+1])
		require.Len(t, sends[2*ping], infoLen)
		assert.Equal(t, uint32(DefaultSize), src.size)
		assert.Equal(t, uint32(DefaultSize), sink.size)
		// The server READs what the first advertisement names, all of it
		// (setRDMA with the advertised size)...
		assert.Equal(t, src.addr, readRETH[ping].VA())
		assert.Equal(t, src.rkey, readRETH[ping].RKey())
		assert.Equal(t, src.size, readRETH[ping].DMALength())
		assert.Equal(t, buf, readResponses[ping], "ping %d's data as rping filled it", ping)
		// ...and WRITEs the C string with its NUL where the second
		// points (echoLen).
		s := &session{rdmaBuf: readResponses[ping]}
		assert.Equal(t, sink.addr, writeRETH[ping].VA())
		assert.Equal(t, sink.rkey, writeRETH[ping].RKey())
		assert.Equal(t, uint32(s.echoLen()), writeRETH[ping].DMALength())
		assert.Equal(t, buf, writes[ping])
	}
	for i, g := range goAheads {
		assert.Equal(t, make([]byte, infoLen), g, "go-ahead %d", i)
	}
}

// checkCapturedMAD checks the connection parameters of rping's REQ
// (rping_init_conn_param) and of the REP librdmacm made of an accept
// without parameters, against what this package passes the CM.
func checkCapturedMAD(t *testing.T, b []byte) {
	t.Helper()
	m, err := mad.Parse(b)
	require.NoError(t, err)
	ours := connParam()
	switch m.Header().AttrID() {
	case mad.AttrREQ:
		r := mad.REQ(m)
		assert.Equal(t, mad.ServiceID(mad.PortSpaceTCP, DefaultPort), r.ServiceID())
		assert.Equal(t, ours.ResponderResources, r.ResponderResources())
		assert.Equal(t, ours.InitiatorDepth, r.InitiatorDepth())
		assert.Equal(t, ours.RetryCount, r.RetryCount())
		assert.Equal(t, ours.RNRRetryCount, r.RNRRetryCount())
	case mad.AttrREP:
		r := mad.REP(m)
		req := *connParam() // what the server heard from the client
		accept := acceptParam(&Config{}, req, 16)
		assert.Equal(t, accept.ResponderResources, r.ResponderResources())
		assert.Equal(t, accept.InitiatorDepth, r.InitiatorDepth())
		assert.Equal(t, accept.RNRRetryCount, r.RNRRetryCount())
	}
}
