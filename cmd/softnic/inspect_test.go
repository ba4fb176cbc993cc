package main

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
)

// testEncap frames packets from 10.1.0.1 to 10.1.0.2 for a QP.
func testEncap(qpn uint32) roce.Encap {
	return roce.Encap{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: netip.MustParseAddr("10.1.0.1"), Dst: netip.MustParseAddr("10.1.0.2"),
		HopLimit: 64, SrcPort: roce.SourcePort(qpn),
	}
}

func roceFrame(t testing.TB, op header.Opcode, size int) []byte {
	e := testEncap(0x12)
	b := make([]byte, 9000)
	var p header.Packet
	n, err := header.LayoutPacket(b[e.HeaderLen():], op, size, &p)
	require.NoError(t, err)
	p.BTH.SetDestQPN(0x12)
	p.BTH.SetPSN(77)
	if p.RETH != nil {
		p.RETH.SetVA(0x1000)
		p.RETH.SetRKey(0xabcd)
		p.RETH.SetDMALength(uint32(size))
	}
	if p.AETH != nil {
		p.AETH.SetSyndrome(header.ACKSyndrome(header.UnlimitedCredits))
	}
	n, err = e.Finish(b, n)
	require.NoError(t, err)
	return b[:n]
}

func writeCapture(t *testing.T, frames ...[]byte) string {
	path := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := pcapfile.NewWriter(f)
	require.NoError(t, err)
	for _, fr := range frames {
		require.NoError(t, w.WritePacket(time.Unix(0, 0), fr))
	}
	require.NoError(t, f.Close())
	return path
}

func runCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestInspectGoodCapture(t *testing.T) {
	arp := make([]byte, 42)
	arp[12], arp[13] = 0x08, 0x06
	path := writeCapture(t,
		roceFrame(t, header.OpRCWriteOnly, 100),
		arp,
		roceFrame(t, header.OpRCAcknowledge, 0),
	)
	code, out, _ := runCmd("inspect", path)
	assert.Equal(t, 0, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[0], "10.1.0.1:")
	assert.Contains(t, lines[0], "RC_RDMA_WRITE_ONLY qp=0x000012 psn=77")
	assert.Contains(t, lines[0], "va=0x1000 rkey=0x0000abcd len=100")
	assert.Contains(t, lines[0], "payload=100")
	assert.Contains(t, lines[0], "ok")
	assert.Contains(t, lines[1], "RC_ACKNOWLEDGE")
	assert.Contains(t, lines[1], "ACK credits=31")
	assert.Equal(t, "3 frames: 2 RoCEv2 (2 good, 0 bad), 1 other", lines[2])
}

// TestInspectGoldenCaptures runs inspect over the captures of real rxe peers
// and hardware NICs: every frame is RoCEv2 and good.
func TestInspectGoldenCaptures(t *testing.T) {
	files, err := filepath.Glob("../../roce/testdata/*.pcap")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, path := range files {
		code, out, errOut := runCmd("inspect", path)
		assert.Equal(t, 0, code, "%s: %s%s", path, out, errOut)
		assert.NotContains(t, out, "BAD", path)
		assert.Regexp(t, `\d+ frames: (\d+) RoCEv2 \(\d+ good, 0 bad\), 0 other`, out, path)
	}
}

func TestInspectBadICRC(t *testing.T) {
	bad := roceFrame(t, header.OpRCSendOnly, 64)
	bad[60] ^= 0x10
	path := writeCapture(t, roceFrame(t, header.OpRCSendOnly, 64), bad)
	code, out, _ := runCmd("inspect", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "BAD")
	assert.Contains(t, out, "(1 good, 1 bad)")
}

// TestInspectRxeFlushICRC: a FLUSH frame of rxe's, whose ICRC is not
// IBA's (roce.RxeFlushICRC), is bad, and inspect says whose ICRC it has.
func TestInspectRxeFlushICRC(t *testing.T) {
	b, err := os.ReadFile("../../roce/testdata/rxe-flush.hex")
	require.NoError(t, err)
	frame, err := hex.DecodeString(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	code, out, _ := runCmd("inspect", writeCapture(t, frame))
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "RC_FLUSH")
	assert.Contains(t, out, "icrc=64f95878 BAD (expected ")
	assert.Contains(t, out, "; rdma_rxe's FLUSH ICRC)")
}

func TestInspectUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk")
	require.NoError(t, os.WriteFile(path, []byte("this is not a pcap"), 0o644))
	code, _, errOut := runCmd("inspect", path)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "malformed capture")
	code, _, _ = runCmd("inspect", filepath.Join(t.TempDir(), "missing.pcap"))
	assert.Equal(t, 2, code)
	code, _, _ = runCmd("inspect")
	assert.Equal(t, 2, code)
}

func FuzzInspect(f *testing.F) {
	var buf bytes.Buffer
	w, _ := pcapfile.NewWriter(&buf)
	_ = w.WritePacket(time.Unix(0, 0), roceFrame(f, header.OpRCReadResponseFirst, 32))
	_ = w.WritePacket(time.Unix(0, 0), roceFrame(f, header.OpRCCompareSwap, 0))
	f.Add(buf.Bytes())
	rping, err := os.ReadFile("../../roce/testdata/rxe-rping.pcap")
	require.NoError(f, err)
	f.Add(rping)
	buf.Reset()
	w, _ = pcapfile.NewWriter(&buf)
	_ = w.WritePacket(time.Unix(0, 0), udFrame(f, mad.GSIQPN, cmMAD(mad.AttrREJ)))
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		sum, err := inspect(bytes.NewReader(b), &out)
		if err == nil {
			require.Equal(t, sum.RoCE, sum.Good+sum.Bad, "summary does not add up: %+v", sum)
		}
	})
}
