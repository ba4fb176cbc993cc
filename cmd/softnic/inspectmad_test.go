package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
)

// TestInspectRpingMADs checks the lines of rxe's rping exchange: the CM
// messages on QP1 are decoded and every other frame is described as before.
func TestInspectRpingMADs(t *testing.T) {
	code, out, errOut := runCmd("inspect", "../../roce/testdata/rxe-rping.pcap")
	require.Equal(t, 0, code, out+errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 30)
	want := map[int]string{
		0:  "CM_REQ lcid=0xea1c70c6 sid=0x0000000001061c06 (tcp:7174) 10.77.0.12:59816 > 10.77.0.11:7174 qpn=0x000011 psn=14324925 mtu=1024 icrc=188fe9cd ok",
		1:  "CM_REP lcid=0xb48a0b9b rcid=0xea1c70c6 qpn=0x000011 psn=6521580 icrc=7991693a ok",
		2:  "CM_RTU lcid=0xea1c70c6 rcid=0xb48a0b9b icrc=32ef0f2e ok",
		27: "CM_DREQ lcid=0xea1c70c6 rcid=0xb48a0b9b rqpn=0x000011 icrc=a4a52b01 ok",
		28: "CM_DREP lcid=0xb48a0b9b rcid=0xea1c70c6 icrc=b20d4e1c ok",
	}
	for i, line := range lines[:29] {
		if w, ok := want[i]; ok {
			assert.Contains(t, line, "UD_SEND_ONLY qp=0x000001 ", i)
			assert.True(t, strings.HasSuffix(line, "payload=256 "+w), "line %d: %s", i, line)
			continue
		}
		assert.NotContains(t, line, "CM_", i)
		assert.Contains(t, line, " RC_", i)
	}
	assert.Equal(t, "29 frames: 29 RoCEv2 (29 good, 0 bad), 0 other", lines[29])
}

// udFrame returns a RoCEv2 frame of a UD SEND ONLY to destQPN from QP1.
func udFrame(t testing.TB, destQPN uint32, payload []byte) []byte {
	e := testEncap(mad.GSIQPN)
	b := make([]byte, 2048)
	var p header.Packet
	n, err := header.LayoutPacket(b[e.HeaderLen():], header.OpUDSendOnly, len(payload), &p)
	require.NoError(t, err)
	p.BTH.SetDestQPN(destQPN)
	p.DETH.SetQKey(mad.GSIQKey)
	p.DETH.SetSrcQP(mad.GSIQPN)
	copy(p.Payload, payload)
	n, err = e.Finish(b, n)
	require.NoError(t, err)
	return b[:n]
}

// cmMAD returns a 256-byte CM MAD of attr with a few fields set.
func cmMAD(attr mad.AttrID) []byte {
	m := make(mad.MAD, mad.Len)
	m.InitCM(attr, 0x42)
	mad.REJ(m).SetLocalCommID(0x11223344)
	mad.REJ(m).SetRemoteCommID(0x55667788)
	return m
}

func TestInspectMADs(t *testing.T) {
	rej := cmMAD(mad.AttrREJ)
	mad.REJ(rej).SetReason(mad.RejectInvalidServiceID)
	badVersion := cmMAD(mad.AttrRTU)
	badVersion[2] = 1
	notCM := make([]byte, 300) // to QP 0x12: not a MAD at all
	path := writeCapture(t,
		udFrame(t, mad.GSIQPN, rej),
		udFrame(t, mad.GSIQPN, badVersion),
		udFrame(t, mad.GSIQPN, rej[:100]),
		udFrame(t, mad.GSIQPN, cmMAD(mad.AttrLAP)),
		udFrame(t, 0x12, notCM),
	)
	code, out, _ := runCmd("inspect", path)
	assert.Equal(t, 1, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 6)
	assert.Contains(t, lines[0], "payload=256 CM_REJ lcid=0x11223344 rcid=0x55667788 msg=0 reason=8 icrc=")
	assert.True(t, strings.HasSuffix(lines[0], " ok"), lines[0])
	assert.Contains(t, lines[1], "MAD class=0x07/1 method=0x03 CM_RTU [mad: unsupported CM class version] icrc=")
	assert.True(t, strings.HasSuffix(lines[1], " ok, MAD BAD"), lines[1])
	assert.Contains(t, lines[2], "payload=100 MAD class=0x07/2 method=0x03 CM_REJ [mad: shorter than a 256-byte MAD]")
	assert.True(t, strings.HasSuffix(lines[2], " ok, MAD BAD"), lines[2])
	assert.Contains(t, lines[3], "CM_LAP [mad: unknown CM attribute]")
	assert.NotContains(t, lines[4], "MAD")
	assert.True(t, strings.HasSuffix(lines[4], " ok"), lines[4])
	assert.Equal(t, "5 frames: 5 RoCEv2 (2 good, 3 bad), 0 other", lines[5])
}

func TestInspectREQWithoutCMAHeader(t *testing.T) {
	req := cmMAD(mad.AttrREQ)
	mad.REQ(req).SetServiceID(mad.ServiceID(mad.PortSpaceTCP, 4791))
	mad.REQ(req).SetPathMTU(3)
	v6 := cmMAD(mad.AttrREQ)
	r6 := mad.REQ(v6)
	r6.SetServiceID(mad.ServiceID(mad.PortSpaceUDP, 9))
	r6.SetPathMTU(5)
	r6.CMAHeader().SetAddrs(netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"))
	r6.CMAHeader().SetSrcPort(1000)
	srp := cmMAD(mad.AttrREQ) // an IB service: no rdma_cm header expected
	mad.REQ(srp).SetServiceID(0x0002c90200402bd4)
	code, out, _ := runCmd("inspect", writeCapture(t,
		udFrame(t, mad.GSIQPN, req), udFrame(t, mad.GSIQPN, v6), udFrame(t, mad.GSIQPN, srp)))
	assert.Equal(t, 0, code, out)
	lines := strings.Split(out, "\n")
	assert.Contains(t, lines[0], "(tcp:4791) [rdma_cm header: mad: rdma_cm header IP version is neither 4 nor 6] qpn=0x000000 psn=0 mtu=1024")
	assert.Contains(t, lines[1], "(udp:9) [fd00::1]:1000 > [fd00::2]:9 qpn=")
	assert.Contains(t, lines[1], "mtu=4096")
	assert.Contains(t, lines[2], "sid=0x0002c90200402bd4 qpn=0x000000 psn=0 mtu=invalid(0) icrc=")
}
