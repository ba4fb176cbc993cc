package roce

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/internal/pcapfile"
)

// TestCNPFrameMatchesConnectX builds a CNP frame as a device with the
// default settings frames it, on the ConnectX-4 Lx capture's addresses,
// ports and QPN, and compares it with the captured frame byte for byte.
// Only the IPv4 identification differs (ConnectX numbers its packets,
// softnic sends 0 with DF, as rxe does), and with it the header checksum
// and the ICRC, which covers the identification; ours must verify.
func TestCNPFrameMatchesConnectX(t *testing.T) {
	f, err := os.Open("testdata/hw-connectx4lx-cnp.pcap")
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	require.NoError(t, err)
	p, err := rd.Next()
	require.NoError(t, err)
	hw := append([]byte(nil), p.Data...)
	var hf Frame
	require.NoError(t, ParseFrame(hw, &hf))

	d := &Device{}
	require.NoError(t, d.setCongestion(DeviceConfig{}))
	e := Encap{SrcMAC: hf.SrcMAC, DstMAC: hf.DstMAC, Src: hf.Src, Dst: hf.Dst, TrafficClass: d.trafficClass(0),
		CNPTrafficClass: d.cnpTrafficClass(), HopLimit: hf.HopLimit, SrcPort: hf.SrcPort}
	frame := make([]byte, 256)
	ib := frame[e.HeaderLen():]
	var pkt header.Packet
	n, err := header.LayoutPacket(ib, header.OpCNP, 16, &pkt)
	require.NoError(t, err)
	clear(pkt.Payload)
	pkt.BTH.SetBECN(true)
	pkt.BTH.SetDestQPN(0x118)
	l, err := e.Finish(frame, n)
	require.NoError(t, err)
	ours := frame[:l]
	require.Len(t, ours, len(hw))
	var of Frame
	require.NoError(t, ParseFrame(ours, &of), "our CNP's ICRC verifies")
	assert.Equal(t, uint8(0xc2), of.TrafficClass, "DSCP 48, ECT(0)")
	const id, csum = 14 + 4, 14 + 10
	for i := range hw {
		switch {
		case i >= id && i < id+2, i >= csum && i < csum+2, i >= len(hw)-4:
			continue
		}
		assert.Equal(t, hw[i], ours[i], "byte %d", i)
	}
}

// TestTrafficClassECN checks the ECN settings: data packets keep the QP's
// DSCP and leave ECT(0) by default, ECT(1) when asked, and with the QP's
// traffic class untouched when ECN is off (as Linux rxe); CNPs carry
// their own DSCP.
func TestTrafficClassECN(t *testing.T) {
	for _, c := range []struct {
		ecn         ECN
		cnpDSCP     int
		tc, want    uint8
		wantCNP     uint8
		description string
	}{
		{ECNDefault, 0, 26 << 2, 26<<2 | 2, 0xc2, "default: ECT(0), CNP DSCP 48"},
		{ECNDefault, 0, 26<<2 | 1, 26<<2 | 2, 0xc2, "the QP's own ECN bits are replaced"},
		{ECNECT1, 46, 0, 1, 46<<2 | 1, "ECT(1)"},
		{ECNNotECT, -1, 26<<2 | 1, 26<<2 | 1, 0, "off: the traffic class as given"},
	} {
		d := &Device{}
		require.NoError(t, d.setCongestion(DeviceConfig{ECN: c.ecn, CNPDSCP: c.cnpDSCP}))
		assert.Equal(t, c.want, d.trafficClass(c.tc), c.description)
		assert.Equal(t, c.wantCNP, d.cnpTrafficClass(), c.description)
	}
	d := &Device{}
	assert.Error(t, d.setCongestion(DeviceConfig{CNPDSCP: 64}))
	assert.Error(t, d.setCongestion(DeviceConfig{ECN: 9}))
	for s, want := range map[string]ECN{"ect0": ECNECT0, "ect1": ECNECT1, "off": ECNNotECT} {
		got, err := ParseECN(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := ParseECN("ce")
	assert.Error(t, err)
}
