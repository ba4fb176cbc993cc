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
// steering program into the other side's socket; so do the hand-off and
// ACK experiments, with the frame counts they imply.
func TestPingPongRoundTrips(t *testing.T) {
	netnstest.Integration(t)
	const rounds, warm = 1000, 50
	for _, tc := range []struct {
		name         string
		handOff, ack bool
	}{{"plain", false, false}, {"ack", false, true}, {"handoff", true, false}, {"handoff+ack", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := PingPong(context.Background(), PingOptions{Count: rounds, Warmup: warm, HandOff: tc.handOff, Ack: tc.ack})
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
			ping, pong := r.PingStats, r.PongStats
			// Per round trip each side sends its frame, and its ACK of the
			// other's with -ack. The run may stop before the last ACK from
			// the ping side is sent or received.
			per, slack := uint64(1), uint64(0)
			if tc.ack {
				per, slack = 2, 1
			}
			want := per * (rounds + warm)
			if r.Lost == 0 {
				if pong.TxPackets != want || ping.RxPackets != want {
					t.Errorf("pong side sent %d frames and ping side received %d, want %d", pong.TxPackets, ping.RxPackets, want)
				}
				if ping.TxPackets+slack < want || ping.TxPackets > want || pong.RxPackets+slack < ping.TxPackets || pong.RxPackets > ping.TxPackets {
					t.Errorf("ping side sent %d frames and pong side received %d, want %d", ping.TxPackets, pong.RxPackets, want)
				}
			} else if ping.TxPackets+1 < want || pong.TxPackets < want || ping.RxPackets < want || pong.RxPackets > ping.TxPackets {
				t.Errorf("ping sent %d received %d, pong sent %d received %d; want at least %d", ping.TxPackets, ping.RxPackets,
					pong.TxPackets, pong.RxPackets, want)
			}
			if s := r.PongProgram.Steered; s < pong.RxPackets || s > ping.TxPackets {
				t.Errorf("pong side's program steered %d frames; socket received %d of %d", s, pong.RxPackets, ping.TxPackets)
			}
			if s := r.PingProgram.Steered; s < ping.RxPackets || s > pong.TxPackets {
				t.Errorf("ping side's program steered %d frames; socket received %d of %d", s, ping.RxPackets, pong.TxPackets)
			}
			if ping.OwnershipErrors+pong.OwnershipErrors != 0 {
				t.Errorf("ownership errors: ping %+v pong %+v", ping, pong)
			}
		})
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
