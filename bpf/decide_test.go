package bpf

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/xdp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	xdpPass     = 2
	xdpRedirect = 4
)

var (
	localV4 = netip.MustParseAddr("10.9.0.1")
	localV6 = netip.MustParseAddr("fd09::1")
	otherV4 = netip.MustParseAddr("10.9.0.2")
	otherV6 = netip.MustParseAddr("fd09::2")
)

// decision is the reference model of softnic.c: which counter a frame
// bumps, given whether a socket is bound on its queue.
func decision(b []byte, socket bool) softnicCounter {
	if len(b) < 14 {
		return softnicCounterCOUNTER_PASS_NOT_ROCE
	}
	proto := binary.BigEndian.Uint16(b[12:])
	l3 := 14
	if proto == 0x8100 || proto == 0x88a8 {
		if len(b) < 18 {
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		proto = binary.BigEndian.Uint16(b[16:])
		l3 = 18
	}
	var dst netip.Addr
	switch proto {
	case 0x0800:
		if len(b) < l3+20 || b[l3+9] != 17 {
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		ihl := int(b[l3] & 0xf)
		if ihl < 5 {
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		if binary.BigEndian.Uint16(b[l3+6:])&0x3fff != 0 {
			return softnicCounterCOUNTER_PASS_FRAGMENT
		}
		udp := l3 + ihl*4
		if len(b) < udp+8 || binary.BigEndian.Uint16(b[udp+2:]) != 4791 {
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		dst = netip.AddrFrom4([4]byte(b[l3+16 : l3+20]))
	case 0x86dd:
		if len(b) < l3+40 {
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		if b[l3+6] != 17 {
			if b[l3+6] == 44 {
				return softnicCounterCOUNTER_PASS_FRAGMENT
			}
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		udp := l3 + 40
		if len(b) < udp+8 || binary.BigEndian.Uint16(b[udp+2:]) != 4791 {
			return softnicCounterCOUNTER_PASS_NOT_ROCE
		}
		dst = netip.AddrFrom16([16]byte(b[l3+24 : l3+40]))
	default:
		return softnicCounterCOUNTER_PASS_NOT_ROCE
	}
	if dst != localV4 && dst != localV6 {
		return softnicCounterCOUNTER_PASS_NOT_LOCAL
	}
	if !socket {
		return softnicCounterCOUNTER_PASS_NO_SOCKET
	}
	return softnicCounterCOUNTER_STEERED
}

// frame builds an Ethernet frame to dst:port with optional VLAN tag.
func frame(dst netip.Addr, port uint16, vlan bool, mutate func([]byte)) []byte {
	b := make([]byte, 0, 128)
	b = append(b, make([]byte, 12)...)
	if vlan {
		b = append(b, 0x81, 0x00, 0, 5)
	}
	if dst.Is4() {
		b = append(b, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0], ip[9] = 0x45, 17
		copy(ip[16:], dst.AsSlice())
		b = append(b, ip...)
	} else {
		b = append(b, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, 17
		copy(ip[24:], dst.AsSlice())
		b = append(b, ip...)
	}
	udp := make([]byte, 8+12+4)
	binary.BigEndian.PutUint16(udp[2:], port)
	b = append(b, udp...)
	if mutate != nil {
		mutate(b)
	}
	return b
}

type decider struct {
	t    testing.TB
	objs softnicObjects
}

func newDecider(t testing.TB) *decider {
	d := &decider{t: t}
	require.NoError(t, loadSoftnicObjects(&d.objs, nil))
	t.Cleanup(func() { d.objs.Close() })
	require.NoError(t, d.objs.LocalV4.Put(localV4.As4(), uint8(1)))
	require.NoError(t, d.objs.LocalV6.Put(softnicIn6Key{Addr: localV6.As16()}, uint8(1)))
	return d
}

func (d *decider) counters() [softnicCounterCOUNTER_MAX]uint64 {
	var out [softnicCounterCOUNTER_MAX]uint64
	var perCPU []uint64
	for c := range out {
		require.NoError(d.t, d.objs.Counters.Lookup(softnicCounter(c), &perCPU))
		for _, v := range perCPU {
			out[c] += v
		}
	}
	return out
}

// run executes the program on b and returns its action and the counter it bumped.
func (d *decider) run(b []byte) (uint32, softnicCounter) {
	before := d.counters()
	ret, err := d.objs.SoftnicSteer.Run(&ebpf.RunOptions{Data: b})
	require.NoError(d.t, err, "run on %d bytes", len(b))
	after := d.counters()
	bumped := softnicCounter(255)
	for c := range after {
		if after[c] != before[c] {
			require.True(d.t, bumped == 255 && after[c] == before[c]+1, "counters moved oddly: %v -> %v", before, after)
			bumped = softnicCounter(c)
		}
	}
	return ret, bumped
}

func (d *decider) bindSocket(t testing.TB) {
	pair := netnstest.NewT(t, netnstest.Config{})
	var s *xdp.Socket
	require.NoError(t, pair.A.Do(func() (err error) { s, err = xdp.Open(pair.A.Ifindex, 0, xdp.Config{NumFrames: 64}); return err }))
	t.Cleanup(func() { s.Close() })
	require.NoError(t, d.objs.Xsks.Put(uint32(0), uint32(s.FD())))
}

func TestSteeringDecisionTable(t *testing.T) {
	netnstest.Integration(t)
	d := newDecider(t)
	cases := []struct {
		name string
		b    []byte
	}{
		{"v4 local", frame(localV4, 4791, false, nil)},
		{"v6 local", frame(localV6, 4791, false, nil)},
		{"v4 local vlan", frame(localV4, 4791, true, nil)},
		{"v6 local vlan", frame(localV6, 4791, true, nil)},
		{"v4 other", frame(otherV4, 4791, false, nil)},
		{"v6 other", frame(otherV6, 4791, false, nil)},
		{"v4 port 4792", frame(localV4, 4792, false, nil)},
		{"v4 tcp", frame(localV4, 4791, false, func(b []byte) { b[14+9] = 6 })},
		{"v4 fragment", frame(localV4, 4791, false, func(b []byte) { b[14+6] = 0x20 })},
		{"v4 ihl 4", frame(localV4, 4791, false, func(b []byte) { b[14] = 0x44 })},
		{"v4 options push UDP out", frame(localV4, 4791, false, func(b []byte) { b[14] = 0x4f })},
		{"v6 fragment header", frame(localV6, 4791, false, func(b []byte) { b[14+6] = 44 })},
		{"v6 hop-by-hop", frame(localV6, 4791, false, func(b []byte) { b[14+6] = 0 })},
		{"arp", frame(localV4, 4791, false, func(b []byte) { b[12], b[13] = 0x08, 0x06 })},
		{"truncated v4", frame(localV4, 4791, false, nil)[:14+20+4]},
		{"truncated v6", frame(localV6, 4791, false, nil)[:14+30]},
		{"eth only", make([]byte, 14)},
	}
	for _, socket := range []bool{false, true} {
		if socket {
			d.bindSocket(t)
		}
		for _, c := range cases {
			want := decision(c.b, socket)
			ret, got := d.run(c.b)
			assert.Equal(t, want, got, "socket=%v %s: counter", socket, c.name)
			wantRet := uint32(xdpPass)
			if want == softnicCounterCOUNTER_STEERED {
				wantRet = xdpRedirect
			}
			assert.Equal(t, wantRet, ret, "socket=%v %s: action", socket, c.name)
		}
	}
}

// FuzzSteeringDecision checks the program against the Go model on
// arbitrary frames: the parser in the kernel and the model must agree.
func FuzzSteeringDecision(f *testing.F) {
	netnstest.Integration(f)
	for _, b := range [][]byte{
		frame(localV4, 4791, false, nil), frame(localV6, 4791, true, nil),
		frame(otherV4, 4791, true, nil), frame(localV4, 4791, false, func(b []byte) { b[14] = 0x46 }),
	} {
		f.Add(b)
	}
	d := newDecider(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 14 || len(b) > 3000 {
			return // the kernel refuses test runs outside these sizes
		}
		d.t = t
		ret, got := d.run(b)
		require.Equal(t, decision(b, false), got, "frame %x: counter", b)
		require.Equal(t, uint32(xdpPass), ret, "frame %x: action", b)
	})
}

// A flow rule redirects the frames it matches, whatever they are, and no
// others; without a socket on the queue they pass.
func TestFlowRuleSteering(t *testing.T) {
	netnstest.Integration(t)
	d := newDecider(t)
	rule := FlowRule{DstMAC: [6]byte{1, 0x50, 0x56, 0x19, 0x20, 0xa7}, DstMACMask: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		EtherType: 0x0800, EtherTypeMask: 0xffff, Proto: 17, ProtoMask: 0xff, DstPort: 5678, DstPortMask: 0xffff,
		NeedPorts: true, IPVersion: 4}
	rule.DstIP[0], rule.DstIP[1], rule.DstIP[2], rule.DstIP[3] = 2, 2, 2, 2
	copy(rule.DstIPMask[:4], []byte{0xff, 0xff, 0xff, 0xff})
	require.NoError(t, setFlowRules(&d.objs, []FlowRule{rule}))
	match := frame(netip.MustParseAddr("2.2.2.2"), 5678, false, func(b []byte) { copy(b, rule.DstMAC[:]) })
	ret, c := d.run(match)
	assert.Equal(t, softnicCounterCOUNTER_PASS_NO_SOCKET, c)
	assert.Equal(t, uint32(xdpPass), ret)
	d.bindSocket(t)
	ret, c = d.run(match)
	assert.Equal(t, softnicCounterCOUNTER_STEERED_FLOW, c)
	assert.Equal(t, uint32(xdpRedirect), ret)
	for name, mutate := range map[string]func([]byte){
		"other port": func(b []byte) { binary.BigEndian.PutUint16(b[14+20+2:], 5679) },
		"other MAC":  func(b []byte) { b[5] ^= 1 },
		"tcp":        func(b []byte) { b[14+9] = 6 },
		"other IP":   func(b []byte) { b[14+19] = 3 },
		"short":      nil,
	} {
		b := slices.Clone(match)
		if mutate != nil {
			mutate(b)
		} else {
			b = b[:14+20+2]
		}
		_, c := d.run(b)
		assert.Equal(t, softnicCounterCOUNTER_PASS_NOT_ROCE, c, name)
	}
	require.NoError(t, setFlowRules(&d.objs, nil))
	_, c = d.run(match)
	assert.Equal(t, softnicCounterCOUNTER_PASS_NOT_ROCE, c, "no rules")
	require.ErrorIs(t, setFlowRules(&d.objs, make([]FlowRule, MaxFlowRules+1)), ErrTooManyFlowRules)
}
