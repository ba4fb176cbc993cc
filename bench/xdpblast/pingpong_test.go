package main

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/netnstest"
)

// A ping-pong completes its round trips, each echo carrying the sequence
// number sent, and every frame in either direction went through the
// steering program into the other side's socket.
func TestPingPongRoundTrips(t *testing.T) {
	netnstest.RequireRoot(t)
	const rounds, warm = 2000, 100
	r, err := PingPong(context.Background(), PingOptions{Count: rounds, Warmup: warm})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("half round trip: median %v, p99 %v, min %v, max %v, mean %v; %d lost", r.Median, r.P99, r.Min, r.Max, r.Mean, r.Lost)
	if r.Rounds != rounds {
		t.Errorf("measured %d round trips, want %d", r.Rounds, rounds)
	}
	if !(0 < r.Min && r.Min <= r.Median && r.Median <= r.P99 && r.P99 <= r.Max && r.Min <= r.Mean && r.Mean <= r.Max) {
		t.Errorf("inconsistent figures: %+v", r)
	}
	sent := uint64(rounds + warm + r.Lost)
	if r.PingStats.TxPackets != sent {
		t.Errorf("ping side sent %d frames, want %d round trips + %d lost", r.PingStats.TxPackets, rounds+warm, r.Lost)
	}
	// A lost round trip may still come back late, so the counts of the
	// other side only bound it.
	if r.PongStats.RxPackets < uint64(rounds+warm) || r.PongStats.RxPackets > sent ||
		r.PongStats.TxPackets != r.PongStats.RxPackets {
		t.Errorf("pong side received %d and sent %d frames of %d", r.PongStats.RxPackets, r.PongStats.TxPackets, sent)
	}
	if r.PingStats.RxPackets < uint64(rounds+warm) {
		t.Errorf("ping side received %d echoes for %d round trips", r.PingStats.RxPackets, rounds+warm)
	}
	if r.PongProgram.Steered != r.PongStats.RxPackets || r.PingProgram.Steered != r.PingStats.RxPackets {
		t.Errorf("programs steered %d and %d frames; sockets received %d and %d",
			r.PongProgram.Steered, r.PingProgram.Steered, r.PongStats.RxPackets, r.PingStats.RxPackets)
	}
	if r.PingStats.OwnershipErrors+r.PongStats.OwnershipErrors != 0 {
		t.Errorf("ownership errors: ping %+v pong %+v", r.PingStats, r.PongStats)
	}
}

func TestPingOptionsRejectBadSizes(t *testing.T) {
	for _, o := range []PingOptions{{Size: 40}, {Size: 1600}, {Size: 4000, MTU: 9000}, {Count: -1}} {
		if err := o.setDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	o := PingOptions{}
	if err := o.setDefaults(); err != nil || o.Size != WriteLatFrame || o.Count != 5000 || o.Warmup != 500 || o.MTU != 1500 {
		t.Errorf("defaults %+v, %v", o, err)
	}
	if WriteLatFrame != 82 {
		t.Errorf("8-byte WRITE ONLY frame is %d bytes, want 82", WriteLatFrame)
	}
}

// The echo goes back to the sender: MACs and IPv4 addresses swapped, the
// rest (UDP ports, payload, IP checksum) untouched.
func TestSwapAddrs(t *testing.T) {
	macA, macB := []byte{2, 0, 0, 0, 0, 1}, []byte{2, 0, 0, 0, 0, 2}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	f := make([]byte, WriteLatFrame)
	buildFrame(f, macA, macB, a, b)
	want := make([]byte, WriteLatFrame)
	buildFrame(want, macB, macA, b, a)
	swapAddrs(f)
	if !bytes.Equal(f, want) {
		t.Fatalf("swapped frame\n%x\nwant\n%x", f, want)
	}
}

func TestHalfStats(t *testing.T) {
	rtts := make([]time.Duration, 100)
	for i := range rtts {
		rtts[i] = time.Duration(200-2*i) * time.Microsecond // 200, 198, ..., 2
	}
	med, p99, lo, hi, mean := halfStats(rtts)
	if med != 51*time.Microsecond || p99 != 100*time.Microsecond || lo != time.Microsecond || hi != 100*time.Microsecond ||
		mean != 50500*time.Nanosecond {
		t.Fatalf("median %v p99 %v min %v max %v mean %v", med, p99, lo, hi, mean)
	}
}
