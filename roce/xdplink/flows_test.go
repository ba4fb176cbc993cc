package xdplink_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/verbs"
)

// rawSide is a raw packet QP in RTS on an xdpSide, with a buffer of
// 256-byte slots: receive i in slot i, sends from the last.
type rawSide struct {
	*xdpSide
	mr  *verbs.MR
	buf []byte
}

const rawSlot = 256

func openRawSide(t *testing.T, e *netnstest.End, recvs int) *rawSide {
	t.Helper()
	s := &rawSide{xdpSide: openXDPSide(t, e)}
	s.createQP(t, &verbs.QPInitAttr{Type: verbs.QPTypeRawPacket, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: recvs}})
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort))
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
	require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState))
	s.buf = make([]byte, (recvs+1)*rawSlot)
	var err error
	s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	for i := range recvs {
		require.NoError(t, s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{
			{Addr: s.mr.Addr() + uint64(i*rawSlot), Length: rawSlot, LKey: s.mr.LKey()}}}))
	}
	return s
}

// send sends frame and waits for its completion.
func (s *rawSide) send(t *testing.T, frame []byte) {
	t.Helper()
	off := len(s.buf) - rawSlot
	copy(s.buf[off:], frame)
	require.NoError(t, s.qp.PostSend(&verbs.SendWR{ID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(len(frame)), LKey: s.mr.LKey()}}}))
	wc := waitRawWC(t, s.scq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
}

func waitRawWC(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	n, err := cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return wc[0]
}

// rawUDP builds an Ethernet/IPv4/UDP frame from src to dst, to UDP port
// dport.
func rawUDP(dst, src [6]byte, from, to netip.Addr, dport uint16) []byte {
	f := make([]byte, 14+20+8+40)
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	copy(ip[12:16], from.AsSlice())
	copy(ip[16:20], to.AsSlice())
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 4000)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	for i := range udp[8:] {
		udp[8+i] = byte(i)
	}
	return f
}

// On a real interface, a flow's XDP rule steers the frames that match it
// to the raw packet QP, whole and as sent, and leaves the others to the
// kernel.
func TestRawPacketFlowOverXDP(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{
		AddrsA: []netip.Prefix{netip.MustParsePrefix("10.82.0.101/24")},
		AddrsB: []netip.Prefix{netip.MustParsePrefix("10.82.0.102/24")}})
	a := openRawSide(t, &pair.A, 1)
	b := openRawSide(t, &pair.B, 4)
	macA, macB := [6]byte(pair.A.MAC), [6]byte(pair.B.MAC)
	all := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	ipB := pair.B.Addr4()
	ip, ipMask := verbs.IPFilter{}, verbs.IPFilter{}
	copy(ip.Dst[:4], ipB.AsSlice())
	copy(ipMask.Dst[:4], all[:4])
	flow, err := b.qp.CreateFlow(&verbs.FlowAttr{Port: 1, Specs: []verbs.FlowSpec{
		{Type: verbs.FlowSpecEth, Eth: verbs.EthFilter{DstMAC: macB}, EthMask: verbs.EthFilter{DstMAC: all}},
		{Type: verbs.FlowSpecIPv4, IP: ip, IPMask: ipMask},
		{Type: verbs.FlowSpecUDP, Port: verbs.PortFilter{DstPort: 5678}, PortMask: verbs.PortFilter{DstPort: 0xffff}},
	}})
	require.NoError(t, err)
	before, err := b.link.Stats()
	require.NoError(t, err)

	a.send(t, rawUDP(macB, macA, pair.A.Addr4(), ipB, 9999)) // the kernel's
	want := rawUDP(macB, macA, pair.A.Addr4(), ipB, 5678)
	a.send(t, want)
	wc := waitRawWC(t, b.rcq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, uint64(0), wc.WRID, "the first frame a flow took")
	require.Equal(t, want, b.buf[:wc.ByteLen])
	after, err := b.link.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(1), after.Program.SteeredFlow-before.Program.SteeredFlow, "the XDP rule took one frame")
	require.Greater(t, after.Program.PassNotRoCE, before.Program.PassNotRoCE, "the other went to the kernel")

	require.NoError(t, flow.Destroy())
	a.send(t, rawUDP(macB, macA, pair.A.Addr4(), ipB, 5678))
	require.Eventually(t, func() bool {
		st, err := b.link.Stats()
		return err == nil && st.Program.PassNotRoCE > after.Program.PassNotRoCE
	}, 5*time.Second, 10*time.Millisecond, "without the flow the kernel gets the frame")
	var none [1]verbs.WC
	n, err := b.rcq.Poll(none[:])
	require.NoError(t, err)
	require.Zero(t, n)
	last, err := b.link.Stats()
	require.NoError(t, err)
	require.Equal(t, after.Program.SteeredFlow, last.Program.SteeredFlow, "no rule left")
}

// A flow on a group MAC address has the interface list it (as `ip maddr`
// shows), so that a NIC's MAC filter lets its frames in, until the flow
// goes; the group's frames reach the QP.
func TestRawPacketFlowJoinsGroupMAC(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{
		AddrsA: []netip.Prefix{netip.MustParsePrefix("10.82.0.103/24")},
		AddrsB: []netip.Prefix{netip.MustParsePrefix("10.82.0.104/24")}})
	a := openRawSide(t, &pair.A, 1)
	b := openRawSide(t, &pair.B, 1)
	group := [6]byte{0x01, 0x50, 0x56, 0x19, 0x20, 0xa7}
	listed := func() bool {
		var data []byte
		require.NoError(t, pair.B.Do(func() (err error) { data, err = os.ReadFile("/proc/thread-self/net/dev_mcast"); return err }))
		return strings.Contains(string(data), pair.B.Ifname) && strings.Contains(string(data), hex.EncodeToString(group[:]))
	}
	require.False(t, listed())
	all := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	flow, err := b.qp.CreateFlow(&verbs.FlowAttr{Port: 1, Specs: []verbs.FlowSpec{
		{Type: verbs.FlowSpecEth, Eth: verbs.EthFilter{DstMAC: group}, EthMask: verbs.EthFilter{DstMAC: all}}}})
	require.NoError(t, err)
	require.True(t, listed(), "the flow's group MAC is the interface's")
	want := rawUDP(group, [6]byte(pair.A.MAC), pair.A.Addr4(), netip.MustParseAddr("2.2.2.2"), 5678)
	a.send(t, want)
	wc := waitRawWC(t, b.rcq)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, want, b.buf[:wc.ByteLen])
	require.NoError(t, flow.Destroy())
	require.False(t, listed(), "gone with the flow")
}
