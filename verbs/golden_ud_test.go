package verbs_test

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// The UD golden capture: ibv_ud_pingpong -s 512 -n 2 between the rxe
// guests, both QPs numbered 0x11, Q_Key 0x11111111.
const (
	goldenUDFile = "rxe-ud-pingpong.pcap"
	goldenUDQKey = 0x11111111
)

// loadGoldenUD returns the IB packets of the capture that src sent.
func loadGoldenUD(t *testing.T, src netip.Addr) [][]byte {
	f, err := os.Open("../roce/testdata/" + goldenUDFile)
	require.NoError(t, err)
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	require.NoError(t, err)
	var pkts [][]byte
	for {
		pkt, err := rd.Next()
		if err != nil {
			break
		}
		var fr roce.Frame
		require.NoError(t, roce.ParseFrame(pkt.Data, &fr))
		if fr.Src == src {
			pkts = append(pkts, append([]byte(nil), fr.IB...))
		}
	}
	require.Len(t, pkts, 2)
	return pkts
}

// TestGoldenRxeUDReceive feeds each side's rxe datagrams to a softnic UD
// QP configured like the other side's: it receives them all, behind a GRH.
func TestGoldenRxeUDReceive(t *testing.T) {
	for _, dir := range [][2]netip.Addr{{goldenClient, goldenServer}, {goldenServer, goldenClient}} {
		from, to := dir[0], dir[1]
		pkts := loadGoldenUD(t, from)
		la, lb := memlink.Pair(memlink.Config{})
		dev, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{to}})
		require.NoError(t, err)
		u := newUDEndpoint(t, dev, 2, verbs.GRHLen+512, goldenUDQKey)
		u.postRecvs(t, 0, 2)
		encap := roce.Encap{SrcMAC: la.HardwareAddr(), DstMAC: lb.HardwareAddr(), Src: from, Dst: to, HopLimit: 64, SrcPort: 0xdf94}
		var p header.Packet
		for i, raw := range pkts {
			buf := la.TxFrame()
			hl := encap.HeaderLen()
			n := copy(buf[hl:], raw)
			header.BTH(buf[hl:]).SetDestQPN(u.qp.QPN())
			l, err := encap.Finish(buf, n)
			require.NoError(t, err)
			la.Send(buf[:l])
			require.NoError(t, la.Flush())
			wc := waitOK(t, u.rcq, uint64(i))
			require.NoError(t, header.ParsePacket(raw, &p))
			assert.Equal(t, uint32(verbs.GRHLen+512), wc.ByteLen)
			assert.Equal(t, p.DETH.SrcQP(), wc.SrcQP)
			slot := u.buf[i*u.slot : (i+1)*u.slot]
			assert.Equal(t, from.As4(), [4]byte(slot[32:36]), "GRH source address")
			assert.Equal(t, p.Payload, slot[verbs.GRHLen:])
		}
		dev.Close()
		la.Close()
		lb.Close()
	}
}

// TestGoldenRxeUDSend makes a softnic UD QP send what each side of the
// capture sent, and checks its packets carry rxe's exact IB headers.
func TestGoldenRxeUDSend(t *testing.T) {
	for _, dir := range [][2]netip.Addr{{goldenClient, goldenServer}, {goldenServer, goldenClient}} {
		from, to := dir[0], dir[1]
		want := loadGoldenUD(t, from)
		var p header.Packet
		require.NoError(t, header.ParsePacket(want[0], &p))
		la, lb := memlink.Pair(memlink.Config{})
		dev, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{from}})
		require.NoError(t, err)
		u := newUDEndpoint(t, dev, 1, 512, goldenUDQKey)
		require.NoError(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
		require.NoError(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, QKey: goldenUDQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey))
		require.NoError(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState))
		require.NoError(t, u.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: p.BTH.PSN()}, verbs.QPAttrState|verbs.QPAttrSQPSN))
		ah, err := u.pd.CreateAH(&verbs.AddressVector{DGID: roce.GIDFromAddr(to), HopLimit: 64})
		require.NoError(t, err)
		for i, raw := range want {
			require.NoError(t, header.ParsePacket(raw, &p))
			copy(u.buf[len(u.buf)-u.slot:], p.Payload)
			u.send(t, ah, p.BTH.DestQPN(), goldenUDQKey, uint64(i), len(p.Payload), verbs.WRSend, 0)
			waitOK(t, u.scq, uint64(i))
		}
		var got [][]byte
		deadline := time.Now().Add(10 * time.Second)
		for len(got) < len(want) && time.Now().Before(deadline) {
			lb.Receive(func(frame []byte) {
				if frame == nil {
					return // the end of a batch
				}
				var fr roce.Frame
				require.NoError(t, roce.ParseFrame(frame, &fr))
				got = append(got, append([]byte(nil), fr.IB...))
			}, 64)
			lb.Wait(time.Millisecond)
		}
		require.Len(t, got, len(want))
		for i := range want {
			// Our QP number is not rxe's: the DETH's source QP is ours.
			w := append([]byte(nil), want[i]...)
			header.DETH(w[header.BTHLen:]).SetSrcQP(u.qp.QPN())
			assert.Equal(t, w, got[i], "packet %d from %v", i, from)
		}
		dev.Close()
		la.Close()
		lb.Close()
	}
}
