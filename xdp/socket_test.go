package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
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
							if !bytes.Equal(g, want) {
								t.Fatalf("%v size %d packet %d: got %d bytes (seq %d), want %d bytes",
									dst, size, first+k, len(g), binary.BigEndian.Uint32(g[len(g)-size+42:]), len(want))
							}
						}
					}
				}
			}
			// Buffers are handed back in the order the kernel took them, so
			// only a packet that wraps around the receive area is split.
			t.Logf("%d multi-buffer packets, %d contiguous", multi, contiguous)
			if tc.contiguous && (multi == 0 || contiguous < multi*9/10) {
				t.Errorf("%d of %d multi-buffer packets contiguous", contiguous, multi)
			}
			if !tc.contiguous && contiguous != 0 {
				t.Errorf("%d multi-buffer packets contiguous without the contiguous layout", contiguous)
			}
			// And back, so both directions are exercised.
			buf := make([]byte, 1000)
			for i := 0; i < 50; i++ {
				sendFrame(t, b.sock, udpFrame(buf, 1000, pair.B.MAC, pair.A.MAC, pair.B.Addr4(), pair.A.Addr4(), uint32(i)))
			}
			if got := receiveFrames(t, a.sock, 50, 5*time.Second); len(got) != 50 {
				t.Fatalf("got %d packets back", len(got))
			}

			// Non-RoCE traffic still reaches the kernel on the same veth.
			for _, dst := range []netip.Addr{pair.B.Addr4(), pair.B.Addr6()} {
				if err := pair.A.Ping(dst, 2*time.Second); err != nil {
					t.Error(err)
				}
			}
			if err := netnstest.TCPEcho(&pair.B, &pair.A, pair.B.Addr4(), bytes.Repeat([]byte("tcp"), 100000), 5*time.Second); err != nil {
				t.Error(err)
			}

			ps, err := b.prog.Stats()
			if err != nil {
				t.Fatal(err)
			}
			wantSteered := uint64(2 * perSize * len(tc.sizes))
			if ps.Steered != wantSteered || ps.PassNotRoCE == 0 {
				t.Errorf("program counters %+v: want %d steered and some passed", ps, wantSteered)
			}
			ss, err := b.sock.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if ss.RxDropped != 0 || ss.RxInvalidDescs != 0 || ss.OwnershipErrors != 0 || ss.RxPackets != wantSteered {
				t.Errorf("socket stats %+v", ss)
			}
			t.Logf("receiver: %+v", ss)
			if tc.busy {
				// An empty ring makes a busy-polling socket drive the
				// driver with recvfrom.
				if n := b.sock.Receive(make([]Desc, 4)); n != 0 {
					t.Fatalf("received %d unexpected frames", n)
				}
				if ss, _ := b.sock.Stats(); ss.RxWakeups == 0 {
					t.Error("busy polling socket did not wake the driver on an empty ring")
				}
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
	}{
		{"missing interface", 4242, 0, small, ErrNoInterface},
		{"missing queue", pair.A.Ifindex, 7, small, ErrNoQueue},
		{"frame size", pair.A.Ifindex, 0, Config{FrameSize: 1000}, ErrConfig},
		{"UMEM beyond any limit", pair.A.Ifindex, 0, Config{NumFrames: 1 << 30}, ErrUMEM},
		{"UMEM beyond memory", pair.A.Ifindex, 0, Config{NumFrames: 1 << 26}, ErrUMEM}, // 256 GiB
		{"zero-copy on veth", pair.A.Ifindex, 0, Config{NumFrames: 64, Mode: ModeZeroCopy}, ErrNoZeroCopy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := open(tc.ifindex, tc.queue, tc.cfg)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			t.Logf("error shown: %v", err)
		})
	}
	t.Run("queue taken", func(t *testing.T) {
		s, err := open(pair.A.Ifindex, 0, small)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s2, err := open(pair.A.Ifindex, 0, small)
		if err == nil {
			s2.Close()
		}
		if !errors.Is(err, ErrQueueBusy) {
			t.Fatalf("got %v, want ErrQueueBusy", err)
		}
	})
}

func TestFrameOwnership(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	var s *Socket
	if err := pair.A.Do(func() (err error) { s, err = Open(pair.A.Ifindex, 0, Config{NumFrames: 8}); return err }); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen := map[uint64]bool{}
	var held []Desc
	for {
		d, buf, ok := s.NextTxFrame()
		if !ok {
			break
		}
		if seen[d.Addr] {
			t.Fatalf("frame %#x handed out twice", d.Addr)
		}
		seen[d.Addr] = true
		if len(buf) != s.FrameSize() {
			t.Fatalf("frame buffer %d bytes", len(buf))
		}
		held = append(held, d)
	}
	if len(held) != 4 {
		t.Fatalf("%d transmit frames, want 4", len(held))
	}
	if err := s.FreeTxFrame(held[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.FreeTxFrame(held[0]); !errors.Is(err, ErrFrameOwnership) {
		t.Fatalf("double free: %v", err)
	}
	// A receive frame the caller never got cannot be released.
	if err := s.Release([]Desc{{Addr: 0}}); !errors.Is(err, ErrFrameOwnership) {
		t.Fatalf("release of a fill-ring frame: %v", err)
	}
	// Nor can a transmit frame go out twice.
	held[1].Len = 60
	if n, err := s.Transmit(held[1:2]); n != 1 || err != nil {
		t.Fatalf("transmit: %d, %v", n, err)
	}
	if n, err := s.Transmit(held[1:2]); n != 0 || !errors.Is(err, ErrFrameOwnership) {
		t.Fatalf("second transmit of one frame: %d, %v", n, err)
	}
	// A descriptor running past its chunk is refused.
	held[2].Len = uint32(s.FrameSize() + 1)
	if _, err := s.Transmit(held[2:3]); !errors.Is(err, ErrFrameOwnership) {
		t.Fatalf("oversized descriptor: %v", err)
	}
	if s.Frame(Desc{Addr: 1 << 40, Len: 10}) != nil {
		t.Fatal("Frame outside the UMEM returned memory")
	}
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
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("open without capabilities: %v, want ErrPermission", err)
	}
	t.Logf("error shown: %v", err)
}

// Without CAP_IPC_LOCK the UMEM counts against RLIMIT_MEMLOCK; a UMEM above
// the limit must fail with ErrUMEM and say why.
func TestOpenLockedMemoryLimit(t *testing.T) {
	netnstest.Integration(t)
	pair := netnstest.NewT(t, netnstest.Config{})
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 1 << 20
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
		t.Fatal(err)
	}
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
	if !errors.Is(err, ErrMemlock) || !errors.Is(err, ErrUMEM) {
		t.Fatalf("16 MiB UMEM with a 1 MiB memlock limit: %v, want ErrMemlock", err)
	}
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
	if err := pair.B.Do(func() (err error) { b1, err = Open(pair.B.Ifindex, 1, cfg); return err }); err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	if err := pair.A.Do(func() (err error) {
		if a0, err = Open(pair.A.Ifindex, 0, cfg); err != nil {
			return err
		}
		a1, err = Open(pair.A.Ifindex, 1, cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
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
	if n := b.sock.Receive(make([]Desc, 16)); n != 0 {
		t.Fatalf("queue 0 socket received %d frames sent to queue 1", n)
	}

	if err := b.prog.SetSocket(1, b1.FD()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		sendFrame(t, a1, frame(uint32(100+i)))
		sendFrame(t, a0, frame(uint32(200+i)))
	}
	for q, s := range []*Socket{b.sock, b1} {
		got := receiveFrames(t, s, 20, 5*time.Second)
		for i, g := range got {
			want := uint32(200 - 100*q + i)
			if seq := binary.BigEndian.Uint32(g[42:]); seq != want {
				t.Fatalf("queue %d packet %d has sequence %d, want %d", q, i, seq, want)
			}
		}
	}
	if err := b.prog.ClearSocket(1); err != nil {
		t.Fatal(err)
	}
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
	if err := pair.A.Do(func() (err error) { a, err = Open(pair.A.Ifindex, 0, cfg); return err }); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	buf := make([]byte, 300)
	for round := 0; round < 5; round++ {
		old := b.sock
		old.Close()
		var s *Socket
		start := time.Now()
		if err := pair.B.Do(func() (err error) { s, err = Open(pair.B.Ifindex, 0, cfg); return err }); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		b.sock = s
		t.Logf("round %d: reopened after %v", round, time.Since(start))
		if err := b.prog.SetSocket(0, s.FD()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			sendFrame(t, a, udpFrame(buf, 300, pair.A.MAC, pair.B.MAC, pair.A.Addr4(), pair.B.Addr4(), uint32(i)))
		}
		if got := receiveFrames(t, s, 20, 5*time.Second); len(got) != 20 {
			t.Fatalf("round %d: %d frames", round, len(got))
		}
	}
}
