package roce

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
)

// rxeFlushFrame is the first RC FLUSH frame Linux 6.12's rdma_rxe sent
// softnic in TestInteropAtomicWriteFlush (testdata/README.md).
func rxeFlushFrame(t testing.TB) []byte {
	b, err := os.ReadFile("testdata/rxe-flush.hex")
	require.NoError(t, err)
	frame, err := hex.DecodeString(string(bytes.TrimSpace(b)))
	require.NoError(t, err)
	return frame
}

// TestRxeFlushICRCOfRxesFrame: the variant computed over the frame rxe
// sent is the ICRC it carries; IBA's check refuses the frame, the rxe
// mode's takes it, and an independent statement of the variant (the CRC
// of the masked packet, then the 32 header bytes again) agrees.
func TestRxeFlushICRCOfRxesFrame(t *testing.T) {
	frame := rxeFlushFrame(t)
	var f Frame
	require.ErrorIs(t, ParseFrame(frame, &f), ErrBadICRC, "IBA's ICRC check")
	require.Equal(t, header.OpRCFlush, header.Opcode(f.IB[0]))
	require.Len(t, f.IB, header.BTHLen+header.FETHLen+header.RETHLen)
	pkt := frame[f.IPOffset:]
	assert.Equal(t, f.ICRC, RxeFlushICRC(pkt), "rxe's variant over rxe's frame")
	assert.NotEqual(t, f.ICRC, ICRC(pkt))

	masked := append([]byte(nil), pkt[:len(pkt)-header.ICRCLen]...)
	masked[1], masked[8], masked[10], masked[11] = 0xff, 0xff, 0xff, 0xff // TOS, TTL, checksum
	masked[26], masked[27] = 0xff, 0xff                                   // UDP checksum
	masked[32] = 0xff                                                     // BTH FECN, BECN, reserved
	lrh := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	want := crc32.ChecksumIEEE(append(append(lrh, masked...), f.IB...))
	assert.Equal(t, want, f.ICRC, "CRC-32 of ones, the masked packet, and BTH..RETH unmasked")

	var g Frame
	require.NoError(t, ParseFrameRxeFlush(frame, &g))
	assert.True(t, g.RxeFlushICRC)
	var p header.Packet
	require.NoError(t, header.ParsePacket(g.IB, &p))
	assert.Equal(t, uint32(72), p.RETH.DMALength())
	assert.Equal(t, header.FlushGlobal, p.FETH.PlacementType())
}

// TestRxeFlushICRCOnlyForFlush: in the mode a FLUSH is sent with rxe's
// ICRC and taken with either; every other packet is sent as without it,
// and one carrying the variant is refused as any bad ICRC.
func TestRxeFlushICRCOnlyForFlush(t *testing.T) {
	for name, e := range testEncaps() {
		iba := buildFrame(t, e, header.OpRCFlush, 0)
		var f Frame
		require.NoError(t, ParseFrameRxeFlush(iba, &f), name)
		assert.False(t, f.RxeFlushICRC, "%s: IBA's ICRC is taken in the mode too", name)

		rxe := e
		rxe.RxeFlushICRC = true
		flush := buildFrame(t, rxe, header.OpRCFlush, 0)
		require.ErrorIs(t, ParseFrame(flush, &f), ErrBadICRC, name)
		pkt := flush[f.IPOffset:]
		assert.Equal(t, RxeFlushICRC(pkt), f.ICRC, "%s: sent with rxe's variant", name)
		require.NoError(t, ParseFrameRxeFlush(flush, &f), name)
		assert.True(t, f.RxeFlushICRC, name)
		flush[len(flush)-10] ^= 1 // a damaged FLUSH fails both
		require.ErrorIs(t, ParseFrameRxeFlush(flush, &f), ErrBadICRC, name)

		for _, op := range []header.Opcode{header.OpRCReadRequest, header.OpRCWriteOnly, header.OpRCAtomicWrite,
			header.OpRCAcknowledge, header.OpUDSendOnly} {
			size := 0
			if op.Info().HasPayload {
				size = 8
			}
			plain, inMode := buildFrame(t, e, op, size), buildFrame(t, rxe, op, size)
			require.Equal(t, plain, inMode, "%s %v: the mode changes only FLUSHes", name, op)
			require.NoError(t, ParseFrame(inMode, &f))
			binary.LittleEndian.PutUint32(inMode[len(inMode)-header.ICRCLen:], RxeFlushICRC(inMode[f.IPOffset:]))
			assert.ErrorIs(t, ParseFrameRxeFlush(inMode, &f), ErrBadICRC, "%s %v with rxe's FLUSH variant", name, op)
			assert.False(t, f.RxeFlushICRC)
		}
	}
}

func TestRxeFlushModeAllocatesNothing(t *testing.T) {
	e := testEncaps()["ipv4"]
	e.RxeFlushICRC = true
	b := buildFrame(t, e, header.OpRCFlush, 0)
	var f Frame
	allocs := testing.AllocsPerRun(500, func() {
		require.NoError(t, ParseFrameRxeFlush(b, &f))
	})
	assert.Zero(t, allocs)
	ibLen := len(f.IB)
	allocs = testing.AllocsPerRun(500, func() {
		_, err := e.Finish(b, ibLen)
		require.NoError(t, err)
	})
	assert.Zero(t, allocs)
}

// FuzzParseFrameRxeFlush: the mode takes every frame ParseFrame takes, as
// ParseFrame does, and beyond them only FLUSHes carrying rxe's variant.
func FuzzParseFrameRxeFlush(f *testing.F) {
	f.Add(rxeFlushFrame(f))
	for _, e := range testEncaps() {
		f.Add(buildFrame(f, e, header.OpRCFlush, 0))
		f.Add(buildFrame(f, e, header.OpRCWriteOnly, 16))
		e.RxeFlushICRC = true
		f.Add(buildFrame(f, e, header.OpRCFlush, 0))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var strict, mode Frame
		serr := ParseFrame(b, &strict)
		merr := ParseFrameRxeFlush(b, &mode)
		if !mode.RxeFlushICRC {
			require.Equal(t, serr, merr)
			return
		}
		require.NoError(t, merr)
		require.ErrorIs(t, serr, ErrBadICRC)
		require.Equal(t, header.OpRCFlush, header.Opcode(mode.IB[0]))
		end := mode.IPOffset + ipHeaderLen(mode) + udpHeaderLen + len(mode.IB) + header.ICRCLen
		require.Equal(t, mode.ICRC, RxeFlushICRC(b[mode.IPOffset:end]))
	})
}
