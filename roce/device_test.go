package roce_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/verbs/verbstest"
)

// devicePair returns two devices on a memlink pair with a connected QP each.
// The QPs, CQs and PDs are verbs objects: the RoCE device only carries
// their packets.
func devicePair(t *testing.T, cfg memlink.Config, addrA, addrB netip.Addr, mtu ibv.MTU) (*roce.Device, *roce.Device, *verbs.QP, *verbs.QP, *verbs.CQ, *verbs.CQ, error) {
	t.Helper()
	la, lb := memlink.Pair(cfg)
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	require.NoError(t, err)
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{addrB}})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close(); la.Close(); lb.Close() })
	mk := func(d *verbs.Device) (*verbs.QP, *verbs.CQ) {
		cq, err := d.CreateCQ(64, nil)
		require.NoError(t, err)
		qp, err := d.AllocPD().CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: ibv.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
		require.NoError(t, err)
		return qp, cq
	}
	qa, ca := mk(a)
	qb, cb := mk(b)
	err = verbstest.ConnectRC(t, qa, qb, addrA, addrB, mtu)
	return a.RoCE(), b.RoCE(), qa, qb, ca, cb, err
}

func TestDeviceIPv6AndCounters(t *testing.T) {
	a, b, qa, qb, ca, cb, err := devicePair(t, memlink.Config{}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"),
		ibv.MTU4096)
	require.NoError(t, err)
	// A zero-length SEND and its ACK, over IPv6. The receive goes first:
	// a SEND that found none would get an RNR NAK, one more frame for A.
	require.NoError(t, qb.PostRecv(&ibv.RecvWR{ID: 2}))
	require.NoError(t, qa.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRSend, Flags: ibv.SendSignaled | ibv.SendInline}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]ibv.WC
	_, err = ca.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, ibv.WCSuccess, wc[0].Status)
	_, err = cb.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, ibv.WCSuccess, wc[0].Status)
	require.Equal(t, uint64(1), b.Counters().Rx.Good.Load())
	require.Equal(t, uint64(1), a.Counters().Rx.Good.Load()) // the ACK
	require.Equal(t, uint64(1), a.Counters().TxFrames.Load())
}

func TestDeviceDropsBadFrames(t *testing.T) {
	addrA, addrB := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	la, lb := memlink.Pair(memlink.Config{})
	b, err := roce.NewDevice(lb, roce.DeviceConfig{Addrs: []netip.Addr{addrB}})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close(); la.Close(); lb.Close() })
	send := func(dst netip.Addr, corrupt bool, notRoCE bool) {
		e := roce.Encap{SrcMAC: la.HardwareAddr(), DstMAC: lb.HardwareAddr(), Src: addrA, Dst: dst, HopLimit: 64, SrcPort: 0xc000}
		f := la.TxFrame()
		require.NotNil(t, f)
		var p header.Packet
		n, err := header.LayoutPacket(f[e.HeaderLen():], header.OpRCAcknowledge, 0, &p)
		require.NoError(t, err)
		l, err := e.Finish(f, n)
		require.NoError(t, err)
		if corrupt {
			f[l-10] ^= 1
		}
		if notRoCE {
			f[12], f[13] = 0x08, 0x06 // ARP
		}
		la.Send(f[:l])
		require.NoError(t, la.Flush())
	}
	send(addrB, true, false)                            // bad ICRC
	send(netip.MustParseAddr("10.1.0.9"), false, false) // not our GID
	send(addrB, false, true)                            // not RoCE
	send(addrB, false, false)                           // good, but no such QP
	require.Eventually(t, func() bool {
		return b.Counters().Rx.BadICRC.Load() == 1 && b.Counters().RxNotForUs.Load() == 1 && b.Counters().Rx.NotRoCE.Load() == 1 &&
			b.Group().Counters().RxNoQP.Load() == 1
	}, 5*time.Second, time.Millisecond)
}

func TestPathMTUMustFitLink(t *testing.T) {
	_, _, _, _, _, _, err := devicePair(t, memlink.Config{MTU: 1500}, netip.MustParseAddr("10.2.0.1"),
		netip.MustParseAddr("10.2.0.2"), ibv.MTU2048)
	require.ErrorIs(t, err, ibv.ErrInvalidArgument)
	_, _, _, _, _, _, err = devicePair(t, memlink.Config{MTU: 1500}, netip.MustParseAddr("10.2.0.1"),
		netip.MustParseAddr("10.2.0.2"), ibv.MTU1024)
	require.NoError(t, err)
}

func TestDeviceResolvesNeighbours(t *testing.T) {
	la, lb := memlink.Pair(memlink.Config{})
	t.Cleanup(func() { la.Close(); lb.Close() })
	peer := netip.MustParseAddr("10.3.0.2")
	asked := 0
	d, err := roce.NewDevice(la, roce.DeviceConfig{Addrs: []netip.Addr{netip.MustParseAddr("10.3.0.1")},
		Resolve: func(a netip.Addr) ([6]byte, error) {
			asked++
			if a != peer {
				return [6]byte{}, errors.New("no route")
			}
			return [6]byte{2, 3, 4, 5, 6, 7}, nil
		}})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	_, err = d.Path(&ibv.AddressVector{DGID: roce.GIDFromAddr(netip.MustParseAddr("10.3.0.9"))}, 5, 1024)
	require.Error(t, err)
	_, err = d.Path(&ibv.AddressVector{DGID: roce.GIDFromAddr(peer)}, 5, 1024)
	require.NoError(t, err)
	_, err = d.Path(&ibv.AddressVector{DGID: roce.GIDFromAddr(peer)}, 6, 1024)
	require.NoError(t, err)
	require.Equal(t, 2, asked, "the second path to the peer uses the cached entry")
}
