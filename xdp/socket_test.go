package xdp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestExchange(t *testing.T) {
	netnstest.Integration(t)
	for _, tc := range []struct {
		name       string
		mtu        int
		multi      bool
		sizes      []int
		busy       bool
		contiguous bool
	}{
		// IB MTU 1024 needs 1024 + headers on a 1500-byte link.
		{"mtu1500", 1500, false, []int{70, 1024 + 58 + 4, 1514}, false, false},
		// IB MTU 4096 needs multi-buffer frames on a 9000-byte link.
		{"mtu9000-multibuffer", 9000, true, []int{70, 1514, 4096 + 58 + 4 + 16, 9014}, false, false},
		{"mtu1500-busypoll", 1500, false, []int{70, 1514}, true, false},
		// The contiguous layout: multi-buffer packets lie in one piece of
		// the UMEM on both sides.
		{"mtu9000-contiguous", 9000, true, []int{70, 1514, 4096 + 58 + 4 + 16, 9014}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair := netnstest.NewT(t, netnstest.Config{MTU: tc.mtu})
			// 1024 receive frames hold all 200 packets of 3 chunks each until read.
			cfg := Config{NumFrames: 2048, MultiBuffer: tc.multi, BusyPoll: tc.busy, Contiguous: tc.contiguous}
			if tc.contiguous {
				cfg.TxFrameSize = 3 * 4096 // a whole 9014-byte frame
			}
			a := setupSide(t, &pair.A, cfg)
			b := setupSide(t, &pair.B, cfg)
			if a.sock.ZeroCopy() {
				t.Log("socket is zero-copy")
			}

			const perSize = 200
			multi, contiguous := 0, 0
			for _, dst := range []netip.Addr{pair.B.Addr4(), pair.B.Addr6()} {
				src := pair.A.Addr4()
				if dst.Is6() {
					src = pair.A.Addr6()
				}
				for _, size := range tc.sizes {
					buf := make([]byte, size)
					// Batches of 50 stay well inside the veth's 256-frame queue
					// even when the receiving side is slow to run.
					for first := 0; first < perSize; first += 50 {
						for i := first; i < first+50; i++ {
							sendFrame(t, a.sock, udpFrame(buf, size, pair.A.MAC, pair.B.MAC, src, dst, uint32(i)))
						}
						got, m, c := receiveFramesSpans(t, b.sock, 50, 5*time.Second)
						multi += m
						contiguous += c
						for k, g := range got {
							want := udpFrame(buf, size, pair.A.MAC, pair.B.MAC, src, dst, uint32(first+k))
							require.True(t, bytes.Equal(g, want), "%v size %d packet %d: got %d bytes (seq %d), want %d bytes",
								dst, size, first+k, len(g), binary.BigEndian.Uint32(g[len(g)-size+42:]), len(want))
						}
					}
				}
			}
			// Buffers are handed back in the order the kernel took them, so
			// only a packet that wraps around the receive area is split.
			t.Logf("%d multi-buffer packets, %d contiguous", multi, contiguous)
			if tc.contiguous {
				assert.NotZero(t, multi, "no multi-buffer packets")
				assert.GreaterOrEqual(t, contiguous, multi*9/10, "%d of %d multi-buffer packets contiguous", contiguous, multi)
			} else {
				assert.Zero(t, contiguous, "multi-buffer packets contiguous without the contiguous layout")
			}
			// And back, so both directions are exercised.
			buf := make([]byte, 1000)
			for i := 0; i < 50; i++ {
				sendFrame(t, b.sock, udpFrame(buf, 1000, pair.B.MAC, pair.A.MAC, pair.B.Addr4(), pair.A.Addr4(), uint32(i)))
			}
			require.Len(t, receiveFrames(t, a.sock, 50, 5*time.Second), 50, "packets back")

			// Non-RoCE traffic still reaches the kernel on the same veth.
			for _, dst := range []netip.Addr{pair.B.Addr4(), pair.B.Addr6()} {
				assert.NoError(t, pair.A.Ping(dst, 2*time.Second))
			}
			assert.NoError(t, netnstest.TCPEcho(&pair.B, &pair.A, pair.B.Addr4(), bytes.Repeat([]byte("tcp"), 100000), 5*time.Second))

			ps, err := b.prog.Stats()
			require.NoError(t, err)
			wantSteered := uint64(2 * perSize * len(tc.sizes))
			assert.Equal(t, wantSteered, ps.Steered, "program counters %+v", ps)
			assert.NotZero(t, ps.PassNotRoCE, "program counters %+v: want some passed", ps)
			ss, err := b.sock.Stats()
			require.NoError(t, err)
			assert.Zero(t, ss.RxDropped, "socket stats %+v", ss)
			assert.Zero(t, ss.RxInvalidDescs, "socket stats %+v", ss)
			assert.Zero(t, ss.OwnershipErrors, "socket stats %+v", ss)
			assert.Equal(t, wantSteered, ss.RxPackets, "socket stats %+v", ss)
			t.Logf("receiver: %+v", ss)
			if tc.busy {
				// An empty ring makes a busy-polling socket drive the
				// driver with recvfrom.
				require.Zero(t, b.sock.Receive(make([]Desc, 4)), "unexpected frames received")
				ss, _ := b.sock.Stats()
				assert.NotZero(t, ss.RxWakeups, "busy polling socket did not wake the driver on an empty ring")
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	open := func(ifindex, queue int, cfg Config) (*Socket, error) {
		var s *Socket
		err := pair.A.Do(func() (err error) { s, err = Open(ifindex, queue, cfg); return err })
		return s, err
	}
	small := Config{NumFrames: 64}
	for _, tc := range []struct {
		name    string
		ifindex int
		queue   int
		cfg     Config
		want    error
		errno   unix.Errno // the system call's error, when one failed
	}{
		{"missing interface", 4242, 0, small, ErrNoInterface, unix.ENODEV},
		{"missing queue", pair.A.Ifindex, 7, small, ErrNoQueue, unix.EINVAL},
		{"frame size", pair.A.Ifindex, 0, Config{FrameSize: 1000}, ErrConfig, 0},
		{"UMEM beyond any limit", pair.A.Ifindex, 0, Config{NumFrames: 1 << 30}, ErrUMEM, 0},
		{"UMEM beyond memory", pair.A.Ifindex, 0, Config{NumFrames: 1 << 26}, ErrUMEM, unix.ENOMEM}, // 256 GiB
		{"zero-copy on veth", pair.A.Ifindex, 0, Config{NumFrames: 64, Mode: ModeZeroCopy}, ErrNoZeroCopy, unix.EOPNOTSUPP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := open(tc.ifindex, tc.queue, tc.cfg)
			if err == nil {
				s.Close()
			}
			require.ErrorIs(t, err, tc.want)
			if tc.errno != 0 {
				// The errno stays in the chain beside the sentinel.
				require.ErrorIs(t, err, tc.errno)
			}
			t.Logf("error shown: %v", err)
		})
	}
	t.Run("queue taken", func(t *testing.T) {
		s, err := open(pair.A.Ifindex, 0, small)
		require.NoError(t, err)
		defer s.Close()
		s2, err := open(pair.A.Ifindex, 0, small)
		if err == nil {
			s2.Close()
		}
		require.ErrorIs(t, err, ErrQueueBusy)
		require.ErrorIs(t, err, unix.EBUSY)
	})
}

func TestFrameOwnership(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	var s *Socket
	require.NoError(t, pair.A.Do(func() (err error) { s, err = Open(pair.A.Ifindex, 0, Config{NumFrames: 8}); return err }))
	defer s.Close()
	seen := map[uint64]bool{}
	var held []Desc
	for {
		d, buf, ok := s.NextTxFrame()
		if !ok {
			break
		}
		require.False(t, seen[d.Addr], "frame %#x handed out twice", d.Addr)
		seen[d.Addr] = true
		require.Len(t, buf, s.FrameSize(), "frame buffer")
		held = append(held, d)
	}
	require.Len(t, held, 4, "transmit frames")
	require.NoError(t, s.FreeTxFrame(held[0]))
	require.ErrorIs(t, s.FreeTxFrame(held[0]), ErrFrameOwnership, "double free")
	// A receive frame the caller never got cannot be released.
	require.ErrorIs(t, s.Release([]Desc{{Addr: 0}}), ErrFrameOwnership, "release of a fill-ring frame")
	// Nor can a transmit frame go out twice.
	held[1].Len = 60
	n, err := s.Transmit(held[1:2])
	require.NoError(t, err, "transmit")
	require.Equal(t, 1, n, "transmit")
	n, err = s.Transmit(held[1:2])
	require.ErrorIs(t, err, ErrFrameOwnership, "second transmit of one frame")
	require.Zero(t, n, "second transmit of one frame")
	// A descriptor running past its chunk is refused.
	held[2].Len = uint32(s.FrameSize() + 1)
	_, err = s.Transmit(held[2:3])
	require.ErrorIs(t, err, ErrFrameOwnership, "oversized descriptor")
	require.Nil(t, s.Frame(Desc{Addr: 1 << 40, Len: 10}), "Frame outside the UMEM returned memory")
}

func TestOpenWithoutPrivileges(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	err := pair.A.Do(func() error {
		return netnstest.WithoutCapabilities(nil, func() error {
			s, err := Open(pair.A.Ifindex, 0, Config{NumFrames: 64})
			if err == nil {
				s.Close()
			}
			return err
		})
	})
	require.ErrorIs(t, err, ErrPermission, "open without capabilities")
	require.ErrorIs(t, err, unix.EPERM, "open without capabilities")
	t.Logf("error shown: %v", err)
}

// Without CAP_IPC_LOCK the UMEM counts against RLIMIT_MEMLOCK; a UMEM above
// the limit must fail with ErrUMEM and say why.
func TestOpenLockedMemoryLimit(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	var old unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old))
	low := old
	low.Cur = 1 << 20
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low))
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
	err := pair.A.Do(func() error {
		return netnstest.WithoutCapabilities([]int{unix.CAP_IPC_LOCK}, func() error {
			s, err := Open(pair.A.Ifindex, 0, Config{NumFrames: 4096}) // 16 MiB
			if err == nil {
				s.Close()
			}
			return err
		})
	})
	require.ErrorIs(t, err, ErrMemlock, "16 MiB UMEM with a 1 MiB memlock limit")
	require.ErrorIs(t, err, ErrUMEM, "16 MiB UMEM with a 1 MiB memlock limit")
	require.ErrorIs(t, err, unix.ENOBUFS, "16 MiB UMEM with a 1 MiB memlock limit")
	t.Logf("error shown: %v", err)
}

// One socket per queue: frames sent on queue q arrive on the peer's queue q
// (veth maps TX queue to RX queue) and reach that queue's socket; with no
// socket on a queue its RoCEv2 frames go to the kernel instead.
func TestSocketPerQueue(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{Queues: 2})
	cfg := Config{NumFrames: 256}
	b := setupSide(t, &pair.B, cfg) // program + socket on B's queue 0
	var b1 *Socket
	var a0, a1 *Socket
	require.NoError(t, pair.B.Do(func() (err error) { b1, err = Open(pair.B.Ifindex, 1, cfg); return err }))
	defer b1.Close()
	err := pair.A.Do(func() (err error) {
		if a0, err = Open(pair.A.Ifindex, 0, cfg); err != nil {
			return err
		}
		a1, err = Open(pair.A.Ifindex, 1, cfg)
		return err
	})
	require.NoError(t, err)
	defer a0.Close()
	defer a1.Close()
	buf := make([]byte, 200)
	frame := func(seq uint32) []byte {
		return udpFrame(buf, 200, pair.A.MAC, pair.B.MAC, pair.A.Addr4(), pair.B.Addr4(), seq)
	}

	// Queue 1 has no socket registered yet: its frames go to the kernel.
	for i := 0; i < 10; i++ {
		sendFrame(t, a1, frame(uint32(i)))
	}
	waitProg(t, b, func(s bpfStats) bool { return s.PassNoSocket == 10 })
	require.Zero(t, b.sock.Receive(make([]Desc, 16)), "queue 0 socket received frames sent to queue 1")

	require.NoError(t, b.prog.SetSocket(1, b1.FD()))
	for i := 0; i < 20; i++ {
		sendFrame(t, a1, frame(uint32(100+i)))
		sendFrame(t, a0, frame(uint32(200+i)))
	}
	for q, s := range []*Socket{b.sock, b1} {
		got := receiveFrames(t, s, 20, 5*time.Second)
		for i, g := range got {
			want := uint32(200 - 100*q + i)
			require.Equal(t, want, binary.BigEndian.Uint32(g[42:]), "queue %d packet %d sequence", q, i)
		}
	}
	require.NoError(t, b.prog.ClearSocket(1))
	sendFrame(t, a1, frame(999))
	waitProg(t, b, func(s bpfStats) bool { return s.PassNoSocket == 11 })
}

// A socket opened right after the previous one on the same queue was closed
// (the kernel frees the queue asynchronously) binds and works.
func TestReopenAfterClose(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	cfg := Config{NumFrames: 256}
	b := setupSide(t, &pair.B, cfg)
	var a *Socket
	require.NoError(t, pair.A.Do(func() (err error) { a, err = Open(pair.A.Ifindex, 0, cfg); return err }))
	defer a.Close()
	buf := make([]byte, 300)
	for round := 0; round < 5; round++ {
		old := b.sock
		old.Close()
		var s *Socket
		start := time.Now()
		err := pair.B.Do(func() (err error) { s, err = Open(pair.B.Ifindex, 0, cfg); return err })
		require.NoError(t, err, "round %d", round)
		b.sock = s
		t.Logf("round %d: reopened after %v", round, time.Since(start))
		require.NoError(t, b.prog.SetSocket(0, s.FD()))
		for i := 0; i < 20; i++ {
			sendFrame(t, a, udpFrame(buf, 300, pair.A.MAC, pair.B.MAC, pair.A.Addr4(), pair.B.Addr4(), uint32(i)))
		}
		require.Len(t, receiveFrames(t, s, 20, 5*time.Second), 20, "round %d", round)
	}
}
