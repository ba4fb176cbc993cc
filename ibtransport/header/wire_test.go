package header

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allOpcodes lists every opcode the table knows.
func allOpcodes() []Opcode {
	var ops []Opcode
	for i := 0; i < 256; i++ {
		if Opcode(i).Valid() {
			ops = append(ops, Opcode(i))
		}
	}
	return ops
}

func TestOpcodeTable(t *testing.T) {
	ops := allOpcodes()
	// 25 RC (IBTA 1.5's FLUSH and ATOMIC_WRITE among them) + 12 UC + 2 UD +
	// CNP + 23 XRC (RC's without FLUSH and ATOMIC_WRITE).
	require.Len(t, ops, 25+12+2+1+23)
	cases := []struct {
		op        Opcode
		name      string
		headerLen int
		pos       Position
		payload   bool
	}{
		{OpRCSendFirst, "RC_SEND_FIRST", 12, PositionFirst, true},
		{OpRCSendOnlyImm, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, PositionOnly, true},
		{OpRCWriteFirst, "RC_RDMA_WRITE_FIRST", 28, PositionFirst, true},
		{OpRCWriteMiddle, "RC_RDMA_WRITE_MIDDLE", 12, PositionMiddle, true},
		{OpRCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, PositionOnly, true},
		{OpRCReadRequest, "RC_RDMA_READ_REQUEST", 28, PositionNone, false},
		{OpRCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", 16, PositionFirst, true},
		{OpRCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, PositionMiddle, true},
		{OpRCAcknowledge, "RC_ACKNOWLEDGE", 16, PositionNone, false},
		{OpRCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", 24, PositionNone, false},
		{OpRCFlush, "RC_FLUSH", 32, PositionNone, false},
		{OpRCAtomicWrite, "RC_ATOMIC_WRITE", 28, PositionNone, true},
		{OpRCCompareSwap, "RC_COMPARE_SWAP", 40, PositionNone, false},
		{OpRCFetchAdd, "RC_FETCH_ADD", 40, PositionNone, false},
		{OpRCSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", 16, PositionLast, true},
		{OpUCWriteOnly, "UC_RDMA_WRITE_ONLY", 28, PositionOnly, true},
		{OpUDSendOnly, "UD_SEND_ONLY", 20, PositionOnly, true},
		{OpUDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, PositionOnly, true},
		{OpCNP, "CNP", 12, PositionNone, true},
	}
	for _, c := range cases {
		info := c.op.Info()
		assert.Equal(t, c.name, c.op.String())
		assert.Equal(t, c.headerLen, info.HeaderLen, c.name)
		assert.Equal(t, c.pos, info.Position, c.name)
		assert.Equal(t, c.payload, info.HasPayload, c.name)
	}
	for _, op := range []Opcode{0x15, 0x18, 0x1f, 0x2c, 0x40, 0x63, 0x66, 0xc0, 0xff} {
		assert.False(t, op.Valid(), "%#x", uint8(op))
		assert.Contains(t, op.String(), "OPCODE_0x")
	}
	// UC has no READ, atomics or ACKs.
	for _, op := range []Opcode{0x2c, 0x31, 0x33, 0x34} {
		assert.False(t, op.Valid())
	}
}

// fillPacket writes distinct values into every header of p.
func fillPacket(p *Packet, seed uint32) {
	p.BTH.SetSolicitedEvent(seed&1 != 0)
	p.BTH.SetMigReq(seed&2 != 0)
	p.BTH.SetDestQPN(0xabcdef ^ seed)
	p.BTH.SetAckReq(true)
	p.BTH.SetPSN(PSN(0xfffffe + seed))
	if p.FETH != nil {
		p.FETH.Set(FlushGlobal, FlushMR)
	}
	if p.RETH != nil {
		p.RETH.SetVA(0x1122334455667788 + uint64(seed))
		p.RETH.SetRKey(0xdeadbeef)
		p.RETH.SetDMALength(1 << 20)
	}
	if p.AETH != nil {
		p.AETH.SetSyndrome(NAKSyndrome(NAKRemoteAccessError))
		p.AETH.SetMSN(0x123456)
	}
	if p.AtomicETH != nil {
		p.AtomicETH.SetVA(0x1000)
		p.AtomicETH.SetRKey(0x01020304)
		p.AtomicETH.SetSwapAdd(0xa5a5a5a5a5a5a5a5)
		p.AtomicETH.SetCompare(0x5a5a5a5a5a5a5a5a)
	}
	if p.AtomicAckETH != nil {
		p.AtomicAckETH.SetOrigData(0x0102030405060708)
	}
	if p.ImmDt != nil {
		p.ImmDt.SetImm(0xcafef00d)
	}
	if p.IETH != nil {
		p.IETH.SetRKey(0x77665544)
	}
	if p.DETH != nil {
		p.DETH.SetQKey(0x80010000)
		p.DETH.SetSrcQP(1)
	}
	for i := range p.Payload {
		p.Payload[i] = byte(i) ^ byte(seed)
	}
}

func TestRoundTripEveryOpcode(t *testing.T) {
	buf := make([]byte, 8192)
	for _, op := range allOpcodes() {
		info := op.Info()
		sizes := []int{0}
		if info.HasPayload {
			sizes = []int{0, 1, 2, 3, 4, 5, 255, 1024, 4093, 4096}
		}
		for _, size := range sizes {
			var out Packet
			n, err := LayoutPacket(buf, op, size, &out)
			require.NoError(t, err, "%v size %d", op, size)
			require.Equal(t, info.HeaderLen+PaddedLen(size), n)
			fillPacket(&out, uint32(size))

			var in Packet
			require.NoError(t, ParsePacket(buf[:n], &in), "%v size %d", op, size)
			assert.Equal(t, op, in.Opcode())
			assert.Equal(t, uint32(0xabcdef^size), in.BTH.DestQPN())
			assert.Equal(t, PSN(0xfffffe).Add(uint32(size)), in.BTH.PSN())
			assert.Equal(t, size&1 != 0, in.BTH.SolicitedEvent())
			assert.Equal(t, size&2 != 0, in.BTH.MigReq())
			assert.True(t, in.BTH.AckReq())
			assert.Equal(t, uint16(DefaultPKey), in.BTH.PKey())
			assert.Equal(t, PaddedLen(size)-size, in.BTH.PadCount())
			assert.Equal(t, out.Payload, in.Payload)
			assert.Equal(t, info.Ext&ExtRETH != 0, in.RETH != nil)
			assert.Equal(t, info.Ext&ExtAETH != 0, in.AETH != nil)
			assert.Equal(t, info.Ext&ExtAtomicETH != 0, in.AtomicETH != nil)
			assert.Equal(t, info.Ext&ExtAtomicAckETH != 0, in.AtomicAckETH != nil)
			assert.Equal(t, info.Ext&ExtImmDt != 0, in.ImmDt != nil)
			assert.Equal(t, info.Ext&ExtIETH != 0, in.IETH != nil)
			assert.Equal(t, info.Ext&ExtDETH != 0, in.DETH != nil)
			if in.RETH != nil {
				assert.Equal(t, uint64(0x1122334455667788+size), in.RETH.VA())
				assert.Equal(t, uint32(0xdeadbeef), in.RETH.RKey())
				assert.Equal(t, uint32(1<<20), in.RETH.DMALength())
			}
			if in.AETH != nil {
				assert.Equal(t, NAKSyndrome(NAKRemoteAccessError), in.AETH.Syndrome())
				assert.Equal(t, uint32(0x123456), in.AETH.MSN())
			}
			if in.AtomicETH != nil {
				assert.Equal(t, uint64(0x1000), in.AtomicETH.VA())
				assert.Equal(t, uint32(0x01020304), in.AtomicETH.RKey())
				assert.Equal(t, uint64(0xa5a5a5a5a5a5a5a5), in.AtomicETH.SwapAdd())
				assert.Equal(t, uint64(0x5a5a5a5a5a5a5a5a), in.AtomicETH.Compare())
			}
			if in.AtomicAckETH != nil {
				assert.Equal(t, uint64(0x0102030405060708), in.AtomicAckETH.OrigData())
			}
			if in.ImmDt != nil {
				assert.Equal(t, uint32(0xcafef00d), in.ImmDt.Imm())
			}
			if in.IETH != nil {
				assert.Equal(t, uint32(0x77665544), in.IETH.RKey())
			}
			if in.DETH != nil {
				assert.Equal(t, uint32(0x80010000), in.DETH.QKey())
				assert.Equal(t, uint32(1), in.DETH.SrcQP())
			}
		}
	}
}

func TestBTHBitsAreIndependent(t *testing.T) {
	b := BTH(make([]byte, BTHLen))
	b.Init(OpRCWriteOnly, 0xffffff, 0xffffff, true)
	b.SetPadCount(3)
	b.SetSolicitedEvent(true)
	b.SetMigReq(true)
	b.SetFECN(true)
	b.SetBECN(true)
	assert.Equal(t, []byte{0x0a, 0xf0, 0xff, 0xff, 0xc0, 0xff, 0xff, 0xff, 0x80, 0xff, 0xff, 0xff}, []byte(b))
	b.SetPadCount(0)
	b.SetSolicitedEvent(false)
	b.SetFECN(false)
	b.SetAckReq(false)
	assert.Equal(t, []byte{0x0a, 0x40, 0xff, 0xff, 0x40, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0xff}, []byte(b))
	assert.True(t, b.MigReq())
	assert.True(t, b.BECN())
	assert.Equal(t, uint8(0), b.TransportVersion())
}

func TestParseErrors(t *testing.T) {
	buf := make([]byte, 256)
	var p Packet
	for _, op := range allOpcodes() {
		size := 0
		if op.Info().HasPayload {
			size = 7
		}
		n, err := LayoutPacket(buf, op, size, &p)
		require.NoError(t, err)
		// Truncated at every offset: never a panic, always a typed error.
		for cut := 0; cut < n; cut++ {
			err := ParsePacket(buf[:cut], &p)
			if cut < op.HeaderLen() {
				assert.ErrorIs(t, err, ErrTruncated, "%v cut %d", op, cut)
			} else if cut < op.HeaderLen()+1 {
				// Only the pad count is left to disagree.
				assert.ErrorIs(t, err, ErrBadPadCount, "%v cut %d", op, cut)
			}
		}
	}

	n, _ := LayoutPacket(buf, OpRCSendOnly, 0, &p)
	p.BTH.SetTransportVersion(1)
	assert.ErrorIs(t, ParsePacket(buf[:n], &p), ErrBadVersion)

	n, _ = LayoutPacket(buf, OpRCSendOnly, 0, &p)
	p.BTH.SetOpcode(0x15)
	assert.ErrorIs(t, ParsePacket(buf[:n], &p), ErrUnknownOpcode)

	n, _ = LayoutPacket(buf, OpRCSendOnly, 2, &p)
	p.BTH.SetPadCount(3) // 4 bytes after the BTH, so 3 pad bytes would be fine...
	require.NoError(t, ParsePacket(buf[:n], &p))
	assert.Len(t, p.Payload, 1)
	n, _ = LayoutPacket(buf, OpRCSendOnly, 0, &p)
	p.BTH.SetPadCount(2) // ...but not with nothing after the BTH
	assert.ErrorIs(t, ParsePacket(buf[:n], &p), ErrBadPadCount)

	n, _ = LayoutPacket(buf, OpRCAcknowledge, 0, &p)
	assert.ErrorIs(t, ParsePacket(buf[:n+4], &p), ErrUnexpectedPayload)

	_, err := LayoutPacket(buf, OpRCAcknowledge, 4, &p)
	assert.ErrorIs(t, err, ErrUnexpectedPayload)
	_, err = LayoutPacket(buf[:20], OpRCWriteOnly, 4, &p)
	assert.ErrorIs(t, err, ErrShortBuffer)
	_, err = LayoutPacket(buf, 0x40, 0, &p)
	assert.ErrorIs(t, err, ErrUnknownOpcode)
	assert.True(t, errors.Is(ErrTruncated, ErrTruncated))
}

func TestParseAllocatesNothing(t *testing.T) {
	buf := make([]byte, 2048)
	var p Packet
	n, err := LayoutPacket(buf, OpRCWriteFirst, 1024, &p)
	require.NoError(t, err)
	// Errors are kept and checked after the runs, so that only the calls
	// under test are counted.
	var parseErr, layoutErr error
	allocs := testing.AllocsPerRun(1000, func() {
		if err := ParsePacket(buf[:n], &p); err != nil {
			parseErr = err
		}
	})
	require.NoError(t, parseErr)
	assert.Zero(t, allocs)
	allocs = testing.AllocsPerRun(1000, func() {
		if _, err := LayoutPacket(buf, OpRCWriteFirst, 1024, &p); err != nil {
			layoutErr = err
		}
	})
	require.NoError(t, layoutErr)
	assert.Zero(t, allocs)
}

func TestPSNArithmetic(t *testing.T) {
	assert.Equal(t, PSN(0), PSN(0xffffff).Add(1))
	assert.Equal(t, PSN(4), PSN(0xfffffe).Add(6))
	assert.Equal(t, PSN(0xfffffe), PSN(2).Add(0xfffffc))
	assert.Equal(t, int32(2), PSN(1).Diff(0xffffff))
	assert.Equal(t, int32(-2), PSN(0xffffff).Diff(1))
	assert.Equal(t, int32(0), PSN(5).Diff(5))
	assert.True(t, PSN(0xffffff).Before(0))
	assert.True(t, PSN(0).After(0xffffff))
	assert.True(t, PSN(10).After(5))
	assert.False(t, PSN(5).After(5))
	assert.False(t, PSN(5).Before(5))
	// Half the circle ahead is "after", the other half "before".
	assert.True(t, PSN(0x7fffff).After(0))
	assert.True(t, PSN(0x800000).Before(0))
	assert.Equal(t, int32(-0x800000), PSN(0x800000).Diff(0))
	// Windows across the wrap.
	assert.True(t, PSN(0xffffff).InWindow(0xfffff0, 128))
	assert.True(t, PSN(0x6f).InWindow(0xfffff0, 128))
	assert.False(t, PSN(0x70).InWindow(0xfffff0, 128))
	assert.False(t, PSN(0xffffef).InWindow(0xfffff0, 128))
	assert.False(t, PSN(5).InWindow(5, 0))
	for start := PSN(0xffff00); start != 0x100; start = start.Add(1) {
		for _, d := range []uint32{0, 1, 127, 0x7fffff} {
			p := start.Add(d)
			assert.Equal(t, int32(d), p.Diff(start))
			assert.True(t, p.InWindow(start, d+1))
			if d > 0 {
				assert.True(t, p.After(start))
				assert.True(t, start.Before(p))
			}
		}
	}
}

func TestSyndromes(t *testing.T) {
	s := ACKSyndrome(UnlimitedCredits)
	assert.Equal(t, Syndrome(0x1f), s)
	assert.Equal(t, SyndromeACK, s.Kind())
	assert.Equal(t, uint8(31), s.Credits())

	s = RNRNAKSyndrome(12)
	assert.Equal(t, Syndrome(0x2c), s)
	assert.Equal(t, SyndromeRNRNAK, s.Kind())
	assert.Equal(t, "640µs", s.RNRTimer().Duration().String())
	assert.Equal(t, "655.36ms", RNRTimer(0).Duration().String())
	assert.Equal(t, "491.52ms", RNRTimer(31).Duration().String())
	assert.Equal(t, "10µs", RNRTimer(1).Duration().String())

	for code, want := range map[NAKCode]Syndrome{
		NAKPSNSequenceError: 0x60, NAKInvalidRequest: 0x61, NAKRemoteAccessError: 0x62,
		NAKRemoteOperationalError: 0x63, NAKInvalidRDRequest: 0x64,
	} {
		s := NAKSyndrome(code)
		assert.Equal(t, want, s)
		assert.Equal(t, SyndromeNAK, s.Kind())
		assert.Equal(t, code, s.NAKCode())
	}
	assert.Equal(t, SyndromeReserved, Syndrome(0x40).Kind())
	assert.Contains(t, Syndrome(0x62).String(), "remote access error")
	// Timer table is monotonic after code 0 (which is the largest, 655.36 ms).
	for c := RNRTimer(2); c < 32; c++ {
		assert.Greater(t, c.Duration(), (c - 1).Duration())
	}
}

func FuzzParsePacket(f *testing.F) {
	buf := make([]byte, 512)
	var p Packet
	for _, op := range allOpcodes() {
		size := 0
		if op.Info().HasPayload {
			size = 13
		}
		n, _ := LayoutPacket(buf, op, size, &p)
		fillPacket(&p, 1)
		f.Add(append([]byte(nil), buf[:n]...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := ParsePacket(b, &p); err != nil {
			return
		}
		info := p.Info()
		if !info.HasPayload {
			require.Empty(t, p.Payload, "payload on %v", p.Opcode())
		}
		require.Equal(t, len(b), info.HeaderLen+len(p.Payload)+len(p.Pad), "views cover the packet")
		if p.FETH != nil {
			// The FETH precedes the RETH, and its fields read back.
			require.Len(t, p.FETH, FETHLen)
			var f [FETHLen]byte
			FETH(f[:]).Set(p.FETH.PlacementType(), p.FETH.SelectivityLevel())
			require.Equal(t, p.FETH[3]&0x3f, f[3], "FETH fields round-trip")
			require.Equal(t, &b[BTHLen], &p.FETH[0], "FETH right after the BTH")
			require.Equal(t, &b[BTHLen+FETHLen], &p.RETH[0], "RETH after the FETH")
		}
		xrc := info.Transport == TransportXRC
		isReq := info.Kind != KindAck && info.Kind != KindAtomicAck && info.Kind != KindReadResponse
		require.Equal(t, xrc && isReq, p.XRCETH != nil, "XRCETH on exactly the XRC requests (%v)", p.Opcode())
		if p.XRCETH != nil {
			// Right after the BTH, before every other extension header.
			require.Equal(t, &b[BTHLen], &p.XRCETH[0])
			require.Equal(t, get24(b[BTHLen+1:]), p.XRCETH.SRQN())
			if p.RETH != nil {
				require.Equal(t, &b[BTHLen+XRCETHLen], &p.RETH[0], "RETH after the XRCETH")
			}
			if p.AtomicETH != nil {
				require.Equal(t, &b[BTHLen+XRCETHLen], &p.AtomicETH[0], "AtomicETH after the XRCETH")
			}
		}
	})
}

func BenchmarkParsePacket(b *testing.B) {
	buf := make([]byte, 2048)
	var p Packet
	n, _ := LayoutPacket(buf, OpRCWriteFirst, 1024, &p)
	b.ReportAllocs()
	for b.Loop() {
		if err := ParsePacket(buf[:n], &p); err != nil {
			require.NoError(b, err)
		}
	}
}

// TestFETH checks the FLUSH extended header's bits as Linux rxe lays them
// (rxe_hdr.h: placement type in bits 3-0, selectivity level in bits 5-4 of
// one big-endian word).
func TestFETH(t *testing.T) {
	buf := make([]byte, 64)
	var p Packet
	n, err := LayoutPacket(buf, OpRCFlush, 0, &p)
	require.NoError(t, err)
	require.Equal(t, 32, n)
	p.FETH.Set(FlushGlobal|FlushPersistent, FlushMR)
	assert.Equal(t, []byte{0, 0, 0, 0x13}, []byte(p.FETH))
	p.RETH.SetDMALength(4096)
	var q Packet
	require.NoError(t, ParsePacket(buf[:n], &q))
	assert.Equal(t, FlushGlobal|FlushPersistent, q.FETH.PlacementType())
	assert.Equal(t, FlushMR, q.FETH.SelectivityLevel())
	assert.Equal(t, uint32(4096), q.RETH.DMALength())
	// Reserved bits are ignored on receive.
	buf[12], buf[15] = 0xff, 0xc1
	require.NoError(t, ParsePacket(buf[:n], &q))
	assert.Equal(t, FlushGlobal, q.FETH.PlacementType())
	assert.Equal(t, FlushRange, q.FETH.SelectivityLevel())
	// ATOMIC_WRITE: a RETH, then 8 bytes of payload.
	n, err = LayoutPacket(buf, OpRCAtomicWrite, 8, &p)
	require.NoError(t, err)
	assert.Equal(t, 12+16+8, n)
	assert.Equal(t, 0, p.BTH.PadCount())
	require.NoError(t, ParsePacket(buf[:n], &q))
	assert.Len(t, q.Payload, 8)
	assert.Nil(t, q.FETH)
}

// TestXRCETH checks XRC requests' layout (IBA XRC annex: opcode prefix
// 0xA0, the XRCETH of 4 bytes right after the BTH, its low 24 bits the
// SRQ number) and that responses carry none.
func TestXRCETH(t *testing.T) {
	buf := make([]byte, 128)
	var p, q Packet
	n, err := LayoutPacket(buf, XRCOpcodeBase|OpRCWriteOnlyImm, 5, &p)
	require.NoError(t, err)
	require.Equal(t, 12+4+16+4+8, n)
	p.XRCETH.SetSRQN(0xabcdef)
	p.RETH.SetRKey(0x11223344)
	assert.Equal(t, []byte{0, 0xab, 0xcd, 0xef}, buf[12:16])
	assert.Equal(t, []byte{0x11, 0x22, 0x33, 0x44}, buf[24:28], "RETH follows the XRCETH")
	require.NoError(t, ParsePacket(buf[:n], &q))
	assert.Equal(t, TransportXRC, q.Info().Transport)
	assert.Equal(t, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", q.Opcode().String())
	assert.Equal(t, uint32(0xabcdef), q.XRCETH.SRQN())
	assert.Equal(t, uint32(0x11223344), q.RETH.RKey())
	// The reserved byte is ignored on receive.
	buf[12] = 0xff
	require.NoError(t, ParsePacket(buf[:n], &q))
	assert.Equal(t, uint32(0xabcdef), q.XRCETH.SRQN())
	// An XRC request cut inside its XRCETH is truncated.
	require.ErrorIs(t, ParsePacket(buf[:14], &q), ErrTruncated)
	for _, op := range []Opcode{0xb1, 0xb2, 0xb0} { // ACK, atomic ACK, READ response only
		n, err = LayoutPacket(buf, op, 0, &p)
		require.NoError(t, err)
		assert.Nil(t, p.XRCETH, "%v", op)
	}
	assert.Equal(t, (OpRCAcknowledge).HeaderLen(), (XRCOpcodeBase | OpRCAcknowledge).HeaderLen())
	assert.Equal(t, OpRCFetchAdd.HeaderLen()+XRCETHLen, (XRCOpcodeBase | OpRCFetchAdd).HeaderLen())
	assert.False(t, (XRCOpcodeBase | OpRCFlush).Valid())
	assert.False(t, (XRCOpcodeBase | OpRCAtomicWrite).Valid())
}
