package hostif

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

func newSQ(t testing.TB, depth, stride int) *WorkQueue {
	q, err := NewWorkQueue(make([]byte, RingSize(depth, stride)), depth, stride)
	require.NoError(t, err)
	return q
}

func TestSendRoundTrip(t *testing.T) {
	ah := &ibv.AH{}
	ahs := func(h uint32) *ibv.AH {
		if h == 7 {
			return ah
		}
		return nil
	}
	stride := SendStride(4, 64)
	require.Equal(t, 128, stride)
	require.Equal(t, 256, SendStride(4, 100))
	for _, wr := range []ibv.SendWR{
		{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled, RemoteAddr: 0x1000, RKey: 9,
			SGL: []ibv.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}},
		{ID: 2, Opcode: ibv.WRRDMAWriteWithImm, Imm: 0xdeadbeef, SGL: []ibv.SGE{}},
		{ID: 3, Opcode: ibv.WRSend, Flags: ibv.SendInline | ibv.SendSolicited, InlineData: []byte("hello")},
		{ID: 4, Opcode: ibv.WRSendWithImm, Imm: 42, SGL: []ibv.SGE{{Addr: 8, Length: 8, LKey: 8}}},
		{ID: 5, Opcode: ibv.WRSendWithInv, InvalidateRKey: 0x12345678, SGL: []ibv.SGE{}},
		{ID: 6, Opcode: ibv.WRRDMARead, Flags: ibv.SendFence, RemoteAddr: 77, RKey: 1, SGL: []ibv.SGE{}},
		{ID: 7, Opcode: ibv.WRAtomicCmpAndSwp, CompareAdd: 1, Swap: 2, RemoteAddr: 64, RKey: 3, SGL: []ibv.SGE{}},
		{ID: 8, Opcode: ibv.WRAtomicFetchAndAdd, CompareAdd: 5, RemoteAddr: 64, RKey: 3, SGL: []ibv.SGE{}},
		{ID: 10, Opcode: ibv.WRAtomicWrite, AtomicWrite: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, RemoteAddr: 64, RKey: 3,
			SGL: []ibv.SGE{}},
		{ID: 11, Opcode: ibv.WRFlush, Flags: ibv.SendSignaled, RemoteAddr: 64, RKey: 3, FlushLength: 1 << 20,
			FlushType: ibv.FlushGlobal, FlushLevel: ibv.FlushMR, SGL: []ibv.SGE{}},
	} {
		e := make([]byte, stride)
		require.NoError(t, EncodeSend(e, &wr, 0))
		var got ibv.SendWR
		require.NoError(t, NewSendDecoder(stride, 4, 64, nil).Decode(e, &got), "%v", wr.Opcode)
		if wr.InlineData == nil {
			wr.InlineData = nil
		}
		require.Equal(t, wr, got)
	}

	ud := ibv.SendWR{ID: 9, Opcode: ibv.WRSend, AH: ah, RemoteQPN: 0x11, RemoteQKey: 0x80000000,
		SGL: []ibv.SGE{{Addr: 1, Length: 1, LKey: 1}}}
	e := make([]byte, stride)
	require.NoError(t, EncodeSend(e, &ud, 7))
	var got ibv.SendWR
	require.NoError(t, NewSendDecoder(stride, 4, 64, ahs).Decode(e, &got))
	require.Equal(t, ud, got)
	require.NoError(t, EncodeSend(e, &ud, 8))
	require.ErrorIs(t, NewSendDecoder(stride, 4, 64, ahs).Decode(e, &got), ErrBadEntry, "an AH handle the session does not have")

	require.Error(t, EncodeSend(e, &ibv.SendWR{Opcode: ibv.WRSend, SGL: make([]ibv.SGE, 5)}, 0))
	require.Error(t, EncodeSend(e, &ibv.SendWR{Opcode: 200}, 0))
}

func TestSendDecodeRejects(t *testing.T) {
	stride := SendStride(2, 32)
	good := func() []byte {
		e := make([]byte, stride)
		require.NoError(t, EncodeSend(e, &ibv.SendWR{Opcode: ibv.WRSend, SGL: []ibv.SGE{{}}}, 0))
		return e
	}
	d := NewSendDecoder(stride, 2, 32, nil)
	var wr ibv.SendWR
	for name, spoil := range map[string]func(e []byte){
		"opcode 10 (TSO)":          func(e []byte) { e[offSendOpcode] = 10 },
		"opcode 255":               func(e []byte) { e[offSendOpcode] = 255 },
		"unknown flag":             func(e []byte) { e[offSendFlags] |= 0x10 },
		"reserved word":            func(e []byte) { e[offSendReserved+1] = 1 },
		"remote SRQ past 24 bits":  func(e []byte) { e[offSendRemoteSrqn+3] = 1 },
		"more SGEs than the QP's":  func(e []byte) { e[offSendCount] = 3 },
		"SGE count past stride":    func(e []byte) { e[offSendCount], e[offSendCount+1] = 0xff, 0xff },
		"inline past the maximum":  func(e []byte) { e[offSendFlags] |= 8; e[offSendCount] = 33 },
		"ATOMIC_WRITE with an SGE": func(e []byte) { e[offSendOpcode] = 15 },
		"FLUSH with an SGE":        func(e []byte) { e[offSendOpcode] = 14 },
		"FLUSH length past 32 bits": func(e []byte) {
			e[offSendOpcode], e[offSendCount] = 14, 0
			e[offSendCompareAdd+4] = 1
		},
		"FLUSH spec past two bytes": func(e []byte) {
			e[offSendOpcode], e[offSendCount] = 14, 0
			e[offSendSwap+2] = 1
		},
	} {
		e := good()
		spoil(e)
		require.ErrorIs(t, d.Decode(e, &wr), ErrBadEntry, name)
	}
	require.ErrorIs(t, d.Decode(make([]byte, stride/2), &wr), ErrBadEntry, "an entry of another size")
	require.NoError(t, d.Decode(good(), &wr))
}

func TestRecvRoundTripAndRejects(t *testing.T) {
	stride := RecvStride(3)
	require.Equal(t, 64, stride)
	e := make([]byte, stride)
	wr := ibv.RecvWR{ID: 77, SGL: []ibv.SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}}
	require.NoError(t, EncodeRecv(e, &wr))
	d := NewRecvDecoder(stride, 3)
	var got ibv.RecvWR
	require.NoError(t, d.Decode(e, &got))
	require.Equal(t, wr, got)

	e[offRecvCount] = 4
	require.ErrorIs(t, d.Decode(e, &got), ErrBadEntry)
	e[offRecvCount] = 1
	e[offRecvReserved] = 1
	require.ErrorIs(t, d.Decode(e, &got), ErrBadEntry)
	require.Error(t, EncodeRecv(e, &ibv.RecvWR{SGL: make([]ibv.SGE, 4)}))
}

func TestWorkQueue(t *testing.T) {
	_, err := NewWorkQueue(make([]byte, RingSize(4, 64)-1), 4, 64)
	require.ErrorIs(t, err, ErrLayout)
	_, err = NewWorkQueue(make([]byte, RingSize(6, 64)), 6, 64)
	require.ErrorIs(t, err, ErrLayout, "a depth that is not a power of two")

	mem := make([]byte, RingSize(4, 64))
	client, err := NewWorkQueue(mem, 4, 64)
	require.NoError(t, err)
	daemon, err := NewWorkQueue(mem, 4, 64)
	require.NoError(t, err)
	for i := range 4 {
		e, ok := client.Next()
		require.True(t, ok)
		e[0] = byte(i)
	}
	_, ok := client.Next()
	require.False(t, ok, "full")
	n, ok := daemon.Pending()
	require.True(t, ok)
	require.Zero(t, n, "nothing published yet")
	client.Publish()
	n, ok = daemon.Pending()
	require.True(t, ok)
	require.EqualValues(t, 4, n)
	require.EqualValues(t, 2, daemon.Entry(daemon.Consumer() + 2)[0])
	daemon.Take(3)
	e, ok := client.Next()
	require.True(t, ok)
	require.EqualValues(t, 0, e[0], "slot 0 again")

	*word(mem, offProducer) = 1000 // a client that broke its queue
	_, ok = daemon.Pending()
	require.False(t, ok)

	daemon.SetState(3)
	require.EqualValues(t, 3, client.State())
}

func TestCompletionQueue(t *testing.T) {
	mem := make([]byte, RingSize(4, CQEntrySize))
	daemon, err := NewCompletionQueue(mem, 4)
	require.NoError(t, err)
	client, err := NewCompletionQueue(mem, 4)
	require.NoError(t, err)

	wcs := []ibv.WC{
		{WRID: 1, Status: ibv.WCSuccess, Opcode: ibv.WCRecv, Flags: ibv.WCWithImm | ibv.WCWithGRH,
			ByteLen: 100, Imm: 0xabcdef01, QPN: 17, SrcQP: 18, PKeyIndex: 1, SLID: 2, SL: 3, DLIDPathBits: 4,
			NetworkHdrType: ibv.NetworkIPv4},
		{WRID: 2, Status: ibv.WCRemAccessErr, Opcode: ibv.WCRDMAWrite, QPN: 17},
		{WRID: 3, Opcode: ibv.WCRecv, Flags: ibv.WCWithInv, InvalidatedRKey: 0x1234, QPN: 17},
		{WRID: 4, Opcode: ibv.WCTMRecv, Flags: ibv.WCTMMatch | ibv.WCTMDataValid, ByteLen: 8, TMTag: 0x0102030405060708,
			TMPriv: 0xa0b0c0d0},
	}
	for i := range wcs {
		require.True(t, daemon.Push(&wcs[i]))
	}
	require.False(t, daemon.Push(&wcs[0]), "full")
	got := make([]ibv.WC, 3)
	require.Equal(t, 3, client.Poll(got))
	require.Equal(t, wcs[:3], got)
	require.True(t, daemon.Push(&wcs[0]))
	require.True(t, daemon.Push(&wcs[1]))
	require.True(t, daemon.Push(&wcs[2]))
	require.False(t, daemon.Push(&wcs[2]), "full again")
	require.Equal(t, 3, client.Poll(got))
	require.Equal(t, []ibv.WC{wcs[3], wcs[0], wcs[1]}, got)
	require.Equal(t, 1, client.Poll(got))
	require.Zero(t, client.Poll(got))

	*word(mem, offCQCons) = 1 << 30 // a consumer index ahead of what was written
	require.False(t, daemon.Push(&wcs[0]))
	daemon.SetOverrun()
	require.True(t, client.Overrun())

	require.False(t, daemon.TakeArm(true), "not armed")
	client.Arm(true)
	require.False(t, daemon.TakeArm(false), "armed for solicited completions only")
	require.True(t, daemon.TakeArm(true))
	require.False(t, daemon.TakeArm(true), "once per arming")
	client.Arm(false)
	require.True(t, daemon.TakeArm(false))
}

// The two sides in two goroutines: every completion arrives once, in order,
// with its fields (the race detector checks the ordering).
func TestCompletionQueueConcurrent(t *testing.T) {
	const n = 100000
	mem := make([]byte, RingSize(64, CQEntrySize))
	daemon, _ := NewCompletionQueue(mem, 64)
	client, _ := NewCompletionQueue(mem, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint64(0); i < n; {
			wc := ibv.WC{WRID: i, ByteLen: uint32(i * 3), QPN: uint32(i)}
			if daemon.Push(&wc) {
				i++
			}
		}
	})
	got := make([]ibv.WC, 16)
	for next := uint64(0); next < n; {
		k := client.Poll(got)
		for _, wc := range got[:k] {
			require.Equal(t, next, wc.WRID)
			require.Equal(t, uint32(next*3), wc.ByteLen)
			next++
		}
	}
	wg.Wait()
}

func FuzzSendDecode(f *testing.F) {
	stride := SendStride(4, 64)
	e := make([]byte, stride)
	EncodeSend(e, &ibv.SendWR{Opcode: ibv.WRRDMAWrite, SGL: []ibv.SGE{{Addr: 1, Length: 2, LKey: 3}}}, 0)
	f.Add(e)
	EncodeSend(e, &ibv.SendWR{Opcode: ibv.WRSend, Flags: ibv.SendInline, InlineData: []byte("abc")}, 1)
	f.Add(e)
	ah := &ibv.AH{}
	f.Fuzz(func(t *testing.T, data []byte) {
		e := make([]byte, stride)
		copy(e, data)
		for _, ahs := range []func(uint32) *ibv.AH{nil, func(h uint32) *ibv.AH {
			if h == 1 {
				return ah
			}
			return nil
		}} {
			var wr ibv.SendWR
			if err := NewSendDecoder(stride, 4, 64, ahs).Decode(e, &wr); err != nil {
				continue
			}
			h := uint32(0)
			if wr.AH != nil {
				h = 1
			}
			again := make([]byte, stride)
			require.NoError(t, EncodeSend(again, &wr, h))
			var wr2 ibv.SendWR
			require.NoError(t, NewSendDecoder(stride, 4, 64, ahs).Decode(again, &wr2))
			require.Equal(t, wr, wr2)
		}
	})
}

func FuzzRecvDecode(f *testing.F) {
	stride := RecvStride(4)
	e := make([]byte, stride)
	EncodeRecv(e, &ibv.RecvWR{ID: 1, SGL: []ibv.SGE{{Addr: 1, Length: 2, LKey: 3}}})
	f.Add(e)
	f.Fuzz(func(t *testing.T, data []byte) {
		e := make([]byte, stride)
		copy(e, data)
		var wr ibv.RecvWR
		if err := NewRecvDecoder(stride, 4).Decode(e, &wr); err != nil {
			return
		}
		require.LessOrEqual(t, len(wr.SGL), 4)
	})
}

// BenchmarkPostAndComplete is one work request's trip through the host
// interface: encoded into the send queue, decoded by the daemon, completed
// into the CQ and polled.
func BenchmarkPostAndComplete(b *testing.B) {
	stride := SendStride(2, 64)
	sq := newSQ(b, 256, stride)
	d := NewSendDecoder(stride, 2, 64, nil)
	cqMem := make([]byte, RingSize(256, CQEntrySize))
	daemonCQ, _ := NewCompletionQueue(cqMem, 256)
	clientCQ, _ := NewCompletionQueue(cqMem, 256)
	wr := ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{{Addr: 1, Length: 64, LKey: 2}}, RemoteAddr: 3, RKey: 4}
	var got ibv.SendWR
	wcs := make([]ibv.WC, 1)
	b.ReportAllocs()
	for b.Loop() {
		e, _ := sq.Next()
		EncodeSend(e, &wr, 0)
		sq.Publish()
		i := sq.Consumer()
		if err := d.Decode(sq.Entry(i), &got); err != nil {
			b.Fatal(err)
		}
		sq.Take(1)
		daemonCQ.Push(&ibv.WC{WRID: got.ID})
		if clientCQ.Poll(wcs) != 1 {
			b.Fatal("no completion")
		}
	}
}

// A BIND_MW and a LOCAL_INV entry carry their window's binding and the
// rkey to invalidate through the ring unchanged.
func TestSendBindRoundTrip(t *testing.T) {
	stride := SendStride(1, 0)
	d := NewSendDecoder(stride, 1, 0, nil)
	for _, wr := range []ibv.SendWR{
		{ID: 5, Opcode: ibv.WRBindMW, Flags: ibv.SendSignaled, Bind: ibv.MWBind{RKey: 0x123456ab, LKey: 77,
			Addr: 1 << 40, Length: 3 << 32, Access: ibv.AccessRemoteWrite | ibv.AccessRemoteRead}},
		{ID: 6, Opcode: ibv.WRLocalInv, InvalidateRKey: 0xfeedbeef},
	} {
		e := make([]byte, stride)
		require.NoError(t, EncodeSend(e, &wr, 0))
		var got ibv.SendWR
		require.NoError(t, d.Decode(e, &got))
		got.SGL = nil
		require.Equal(t, wr, got)
	}
}
