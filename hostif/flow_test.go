package hostif

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

func sampleFlow() ibv.FlowAttr {
	ip, ipm := ibv.IPv4Filter(netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("2.2.2.2"))
	ip.Proto, ipm.Proto = 17, 0xff
	v6 := ibv.IPFilter{FlowLabel: 0x12345, Proto: 6, TOS: 3, TTL: 64}
	v6.Src[0], v6.Dst[15] = 0xa0, 0xb9
	return ibv.FlowAttr{Type: ibv.FlowAttrNormal, Priority: 3, Port: 1, Specs: []ibv.FlowSpec{
		{Type: ibv.FlowSpecEth, Eth: ibv.EthFilter{DstMAC: [6]byte{1, 0x50, 0x56, 0x19, 0x20, 0xa7}, EtherType: 0x800, VLANTag: 0xc0c},
			EthMask: ibv.EthFilter{DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EtherType: 0xffff}},
		{Type: ibv.FlowSpecIPv4Ext, IP: ip, IPMask: ipm},
		{Type: ibv.FlowSpecIPv6, IP: v6, IPMask: v6},
		{Type: ibv.FlowSpecUDP, Port: ibv.PortFilter{DstPort: 5678, SrcPort: 1234}, PortMask: ibv.PortFilter{DstPort: 0xffff}},
	}}
}

// A flow survives encoding and decoding whole, laid out as libibverbs'
// filters are (network byte order).
func TestFlowRoundTrip(t *testing.T) {
	a := sampleFlow()
	r, err := EncodeFlow(9, &a)
	require.NoError(t, err)
	require.Equal(t, uint16(0x800), binary.BigEndian.Uint16(r.Specs[0].Val[12:14]))
	require.Equal(t, uint16(8+2*16), r.Specs[0].Size)
	got, err := DecodeFlow(&r)
	require.NoError(t, err)
	require.Equal(t, a, got)
}

// Bad requests are refused with typed errors.
func TestFlowDecodeErrors(t *testing.T) {
	a := sampleFlow()
	r, _ := EncodeFlow(1, &a)
	bad := r
	bad.Specs[1].Size = 12
	_, err := DecodeFlow(&bad)
	require.ErrorIs(t, err, ibv.ErrInvalidArgument)
	bad = r
	bad.Specs[0].Type = 0x1000 // an action
	_, err = DecodeFlow(&bad)
	require.ErrorIs(t, err, ErrFlowUnsupported)
	bad = r
	bad.NumSpecs = 9
	_, err = DecodeFlow(&bad)
	require.ErrorIs(t, err, ibv.ErrInvalidArgument)
}

// Whatever a request holds, DecodeFlow returns, and what it accepts
// encodes back to what it decodes.
func FuzzDecodeFlow(f *testing.F) {
	a := sampleFlow()
	r, _ := EncodeFlow(1, &a)
	f.Add(encodeBytes(&r))
	f.Add(make([]byte, 720))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r CreateFlowRequest
		if err := decodeBytes(b, &r); err != nil {
			return
		}
		got, err := DecodeFlow(&r)
		if err != nil {
			return
		}
		back, err := EncodeFlow(r.QP, &got)
		require.NoError(t, err)
		again, err := DecodeFlow(&back)
		require.NoError(t, err)
		require.Equal(t, got, again)
	})
}

func encodeBytes(r *CreateFlowRequest) []byte {
	b := make([]byte, binary.Size(r))
	binary.Encode(b, binary.LittleEndian, r)
	return b
}

func decodeBytes(b []byte, r *CreateFlowRequest) error {
	_, err := binary.Decode(b, binary.LittleEndian, r)
	return err
}
