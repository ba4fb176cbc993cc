package mad_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// fieldCase sets one field to all ones; mask is the bits it must cover,
// from byte off of the MAD.
type fieldCase struct {
	name string
	set  func(m mad.MAD, ones bool)
	off  int
	mask []byte
}

func u8(ones bool, width uint) uint8 {
	if ones {
		return 1<<width - 1
	}
	return 0
}

func u32v(ones bool, width uint) uint32 {
	if ones {
		return 1<<width - 1
	}
	return 0
}

// Positions from IBA tables 106-113 (Linux ibta_vol1_c12.h), offset by the
// 24-byte MAD header.
var bitFields = []fieldCase{
	{"REQ local QPN", func(m mad.MAD, o bool) { mad.REQ(m).SetLocalQPN(u32v(o, 24)) }, 56, []byte{0xff, 0xff, 0xff}},
	{"REQ remote CM timeout", func(m mad.MAD, o bool) { mad.REQ(m).SetRemoteCMResponseTimeout(u8(o, 5)) }, 67, []byte{0xf8}},
	{"REQ transport type", func(m mad.MAD, o bool) { mad.REQ(m).SetTransportServiceType(u8(o, 2)) }, 67, []byte{0x06}},
	{"REQ flow control", func(m mad.MAD, o bool) { mad.REQ(m).SetEndToEndFlowControl(o) }, 67, []byte{0x01}},
	{"REQ starting PSN", func(m mad.MAD, o bool) { mad.REQ(m).SetStartingPSN(u32v(o, 24)) }, 68, []byte{0xff, 0xff, 0xff}},
	{"REQ local CM timeout", func(m mad.MAD, o bool) { mad.REQ(m).SetLocalCMResponseTimeout(u8(o, 5)) }, 71, []byte{0xf8}},
	{"REQ retry count", func(m mad.MAD, o bool) { mad.REQ(m).SetRetryCount(u8(o, 3)) }, 71, []byte{0x07}},
	{"REQ path MTU", func(m mad.MAD, o bool) { mad.REQ(m).SetPathMTU(ibv.MTU(u8(o, 4))) }, 74, []byte{0xf0}},
	{"REQ RDC exists", func(m mad.MAD, o bool) { mad.REQ(m).SetRDCExists(o) }, 74, []byte{0x08}},
	{"REQ RNR retry", func(m mad.MAD, o bool) { mad.REQ(m).SetRNRRetryCount(u8(o, 3)) }, 74, []byte{0x07}},
	{"REQ max CM retries", func(m mad.MAD, o bool) { mad.REQ(m).SetMaxCMRetries(u8(o, 4)) }, 75, []byte{0xf0}},
	{"REQ SRQ", func(m mad.MAD, o bool) { mad.REQ(m).SetSRQ(o) }, 75, []byte{0x08}},
	{"REQ ext transport", func(m mad.MAD, o bool) { mad.REQ(m).SetExtendedTransportType(u8(o, 3)) }, 75, []byte{0x07}},
	{"REQ flow label", func(m mad.MAD, o bool) { mad.REQ(m).PrimaryPath().SetFlowLabel(u32v(o, 20)) }, 112, []byte{0xff, 0xff, 0xf0}},
	{"REQ packet rate", func(m mad.MAD, o bool) { mad.REQ(m).PrimaryPath().SetPacketRate(u8(o, 6)) }, 115, []byte{0x3f}},
	{"REQ SL", func(m mad.MAD, o bool) { mad.REQ(m).PrimaryPath().SetSL(u8(o, 4)) }, 118, []byte{0xf0}},
	{"REQ subnet local", func(m mad.MAD, o bool) { mad.REQ(m).PrimaryPath().SetSubnetLocal(o) }, 118, []byte{0x08}},
	{"REQ ACK timeout", func(m mad.MAD, o bool) { mad.REQ(m).PrimaryPath().SetLocalACKTimeout(u8(o, 5)) }, 119, []byte{0xf8}},
	{"REQ alt flow label", func(m mad.MAD, o bool) { mad.REQ(m).AlternatePath().SetFlowLabel(u32v(o, 20)) }, 156, []byte{0xff, 0xff, 0xf0}},
	{"REQ alt ACK timeout", func(m mad.MAD, o bool) { mad.REQ(m).AlternatePath().SetLocalACKTimeout(u8(o, 5)) }, 163, []byte{0xf8}},
	{"REQ SAP supported", func(m mad.MAD, o bool) { mad.REQ(m).SetSAPSupported(o) }, 163, []byte{0x04}},
	{"MRA message", func(m mad.MAD, o bool) { mad.MRA(m).SetMessageMRAed(u8(o, 2)) }, 32, []byte{0xc0}},
	{"MRA timeout", func(m mad.MAD, o bool) { mad.MRA(m).SetServiceTimeout(u8(o, 5)) }, 33, []byte{0xf8}},
	{"REJ message", func(m mad.MAD, o bool) { mad.REJ(m).SetMessageRejected(u8(o, 2)) }, 32, []byte{0xc0}},
	{"REJ reason", func(m mad.MAD, o bool) { mad.REJ(m).SetReason(mad.RejectReason(u32v(o, 16))) }, 34, []byte{0xff, 0xff}},
	{"REP local QPN", func(m mad.MAD, o bool) { mad.REP(m).SetLocalQPN(u32v(o, 24)) }, 36, []byte{0xff, 0xff, 0xff}},
	{"REP starting PSN", func(m mad.MAD, o bool) { mad.REP(m).SetStartingPSN(u32v(o, 24)) }, 44, []byte{0xff, 0xff, 0xff}},
	{"REP target ACK delay", func(m mad.MAD, o bool) { mad.REP(m).SetTargetACKDelay(u8(o, 5)) }, 50, []byte{0xf8}},
	{"REP failover", func(m mad.MAD, o bool) { mad.REP(m).SetFailoverAccepted(u8(o, 2)) }, 50, []byte{0x06}},
	{"REP flow control", func(m mad.MAD, o bool) { mad.REP(m).SetEndToEndFlowControl(o) }, 50, []byte{0x01}},
	{"REP RNR retry", func(m mad.MAD, o bool) { mad.REP(m).SetRNRRetryCount(u8(o, 3)) }, 51, []byte{0xe0}},
	{"REP SRQ", func(m mad.MAD, o bool) { mad.REP(m).SetSRQ(o) }, 51, []byte{0x10}},
	{"DREQ remote QPN", func(m mad.MAD, o bool) { mad.DREQ(m).SetRemoteQPN(u32v(o, 24)) }, 32, []byte{0xff, 0xff, 0xff}},
}

// TestBitFieldPositions sets each packed field in a zero MAD and clears it
// in an all-ones MAD: exactly its bits change, and the getter reads it back.
func TestBitFieldPositions(t *testing.T) {
	for _, fc := range bitFields {
		t.Run(fc.name, func(t *testing.T) {
			want := make([]byte, mad.Len)
			copy(want[fc.off:], fc.mask)
			m := make(mad.MAD, mad.Len)
			fc.set(m, true)
			assert.Equal(t, want, []byte(m), "set in a zero MAD")
			for i := range m {
				m[i] = 0xff
			}
			fc.set(m, false)
			for i := range want {
				want[i] = ^want[i]
			}
			assert.Equal(t, want, []byte(m), "cleared in an all-ones MAD")
		})
	}
}

func TestGetters(t *testing.T) {
	m := make(mad.MAD, mad.Len)
	m.InitCM(mad.AttrREQ, 0x0102030405060708)
	r := mad.REQ(m)
	r.SetRemoteCMResponseTimeout(21)
	r.SetTransportServiceType(mad.TransportUC)
	r.SetPathMTU(5)
	r.SetRNRRetryCount(6)
	r.PrimaryPath().SetFlowLabel(0xabcde)
	r.PrimaryPath().SetPacketRate(0x2a)
	r.PrimaryPath().SetSL(9)
	assert.Equal(t, uint8(21), r.RemoteCMResponseTimeout())
	assert.Equal(t, uint8(mad.TransportUC), r.TransportServiceType())
	assert.Equal(t, ibv.MTU4096, r.PathMTU())
	assert.Equal(t, uint8(6), r.RNRRetryCount())
	assert.Equal(t, uint32(0xabcde), r.PrimaryPath().FlowLabel())
	assert.Equal(t, uint8(0x2a), r.PrimaryPath().PacketRate())
	assert.Equal(t, uint8(9), r.PrimaryPath().SL())
	assert.Equal(t, uint64(0x0102030405060708), m.Header().TID())
	assert.Equal(t, mad.AttrREQ, m.Header().AttrID())

	j := mad.MRA(m)
	j.SetMessageMRAed(mad.MsgREP)
	j.SetServiceTimeout(17)
	assert.Equal(t, uint8(mad.MsgREP), j.MessageMRAed())
	assert.Equal(t, uint8(17), j.ServiceTimeout())
}

func TestPrivateDataRoom(t *testing.T) {
	m := make(mad.MAD, mad.Len)
	cases := []struct {
		name string
		room int
		set  func([]byte) error
		get  func() []byte
	}{
		{"REQ", 92, mad.REQ(m).SetPrivateData, mad.REQ(m).PrivateData},
		{"MRA", 222, mad.MRA(m).SetPrivateData, mad.MRA(m).PrivateData},
		{"REJ", 148, mad.REJ(m).SetPrivateData, mad.REJ(m).PrivateData},
		{"REP", 196, mad.REP(m).SetPrivateData, mad.REP(m).PrivateData},
		{"RTU", 224, mad.RTU(m).SetPrivateData, mad.RTU(m).PrivateData},
		{"DREQ", 220, mad.DREQ(m).SetPrivateData, mad.DREQ(m).PrivateData},
		{"DREP", 224, mad.DREP(m).SetPrivateData, mad.DREP(m).PrivateData},
	}
	for _, c := range cases {
		clear(m)
		assert.Len(t, c.get(), c.room, c.name)
		full := make([]byte, c.room)
		for i := range full {
			full[i] = byte(i + 1)
		}
		require.NoError(t, c.set(full), c.name)
		assert.Equal(t, full, c.get(), c.name)
		assert.Equal(t, byte(1), m[mad.Len-c.room], "%s: private data ends the MAD", c.name)
		require.NoError(t, c.set([]byte{9}), c.name)
		assert.Equal(t, append([]byte{9}, make([]byte, c.room-1)...), c.get(), "%s: the rest is zeroed", c.name)
		assert.ErrorIs(t, c.set(make([]byte, c.room+1)), mad.ErrPrivateDataTooLong, c.name)
	}
}

func TestREJ(t *testing.T) {
	m := make(mad.MAD, mad.Len)
	m.InitCM(mad.AttrREJ, 1)
	r := mad.REJ(m)
	r.SetLocalCommID(7)
	r.SetReason(mad.RejectInvalidServiceID)
	r.SetMessageRejected(mad.MsgREQ)
	require.NoError(t, r.SetARI([]byte{1, 2, 3}))
	assert.Equal(t, uint8(3), r.ARILength())
	assert.Equal(t, []byte{1, 2, 3}, r.ARI())
	assert.Equal(t, byte(3<<1), m[33])
	assert.Equal(t, []byte{0, 8}, []byte(m[34:36]))
	_, err := mad.Parse(m)
	require.NoError(t, err)
	assert.ErrorIs(t, r.SetARI(make([]byte, mad.REJARILen+1)), mad.ErrBadARILength)
	require.NoError(t, r.SetARI(make([]byte, mad.REJARILen)))
	m[33] = (mad.REJARILen + 1) << 1
	_, err = mad.Parse(m)
	assert.ErrorIs(t, err, mad.ErrBadARILength)
}

func TestCMAHeader(t *testing.T) {
	assert.Equal(t, 56, mad.CMAUserDataLen, "librdmacm's limit for a connect's private data")
	b := make(mad.CMAHeader, mad.CMAHeaderLen)
	src, dst := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	b.SetAddrs(src, dst)
	b.SetSrcPort(4242)
	require.NoError(t, b.Check())
	assert.Equal(t, uint8(6), b.IPVersion())
	assert.Equal(t, src, b.SrcAddr())
	assert.Equal(t, dst, b.DstAddr())
	assert.Equal(t, uint16(4242), b.SrcPort())
	assert.Equal(t, byte(0x60), b[1])

	b.SetAddrs(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))
	assert.Equal(t, byte(0x40), b[1])
	assert.Equal(t, append(make([]byte, 12), 10, 0, 0, 1), []byte(b[4:20]), "IPv4 after 12 zero bytes")
	assert.Equal(t, netip.MustParseAddr("10.0.0.2"), b.DstAddr())

	b.SetIPVersion(5)
	assert.ErrorIs(t, b.Check(), mad.ErrBadIPVersion)
	b.SetIPVersion(4)
	b.SetVersion(1)
	assert.ErrorIs(t, b.Check(), mad.ErrBadCMAVersion)
}

func TestServiceID(t *testing.T) {
	assert.Equal(t, uint64(0x01061c06), mad.ServiceID(mad.PortSpaceTCP, 7174))
	ps, port, ok := mad.SplitServiceID(mad.ServiceID(mad.PortSpaceUDP, 18515))
	assert.True(t, ok)
	assert.Equal(t, mad.PortSpaceUDP, ps)
	assert.Equal(t, uint16(18515), port)
	_, _, ok = mad.SplitServiceID(0x1000000001061c06)
	assert.False(t, ok)
}

func TestAttrNames(t *testing.T) {
	assert.Equal(t, "CM_REQ", mad.AttrREQ.String())
	assert.Equal(t, "CM_DREP", mad.AttrDREP.String())
	assert.Equal(t, "CM_ATTR_0x00ab", mad.AttrID(0xab).String())
	assert.True(t, mad.AttrMRA.Supported())
	assert.False(t, mad.AttrLAP.Supported())
}

func TestPathGIDs(t *testing.T) {
	p := make(mad.Path, mad.PathLen)
	var l, r ibv.GID
	for i := range l {
		l[i], r[i] = byte(i), byte(0x80+i)
	}
	p.SetLocalGID(l)
	p.SetRemoteGID(r)
	assert.Equal(t, l, p.LocalGID())
	assert.Equal(t, r, p.RemoteGID())
	assert.Equal(t, l[:], []byte(p[4:20]))
	assert.Equal(t, r[:], []byte(p[20:36]))
}
