package main

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			require.NoError(t, err)
			t.Logf("half round trip: median %v, p99 %v, min %v, max %v, mean %v; %d lost", r.Median, r.P99, r.Min, r.Max, r.Mean, r.Lost)
			assert.Equal(t, rounds, r.Rounds, "round trips measured")
			assert.Truef(t, 0 < r.Min && r.Min <= r.Median && r.Median <= r.P99 && r.P99 <= r.Max && r.Min <= r.Mean && r.Mean <= r.Max,
				"inconsistent figures: %+v", r)
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
				assert.Equal(t, want, pong.TxPackets, "frames the pong side sent")
				assert.Equal(t, want, ping.RxPackets, "frames the ping side received")
				assert.Truef(t, ping.TxPackets+slack >= want && ping.TxPackets <= want && pong.RxPackets+slack >= ping.TxPackets && pong.RxPackets <= ping.TxPackets,
					"ping side sent %d frames and pong side received %d, want %d", ping.TxPackets, pong.RxPackets, want)
			} else {
				assert.Truef(t, ping.TxPackets+1 >= want && pong.TxPackets >= want && ping.RxPackets >= want && pong.RxPackets <= ping.TxPackets,
					"ping sent %d received %d, pong sent %d received %d; want at least %d", ping.TxPackets, ping.RxPackets,
					pong.TxPackets, pong.RxPackets, want)
			}
			s := r.PongProgram.Steered
			assert.Truef(t, s >= pong.RxPackets && s <= ping.TxPackets,
				"pong side's program steered %d frames; socket received %d of %d", s, pong.RxPackets, ping.TxPackets)
			s = r.PingProgram.Steered
			assert.Truef(t, s >= ping.RxPackets && s <= pong.TxPackets,
				"ping side's program steered %d frames; socket received %d of %d", s, ping.RxPackets, pong.TxPackets)
			assert.Zerof(t, ping.OwnershipErrors+pong.OwnershipErrors, "ownership errors: ping %+v pong %+v", ping, pong)
		})
	}
}

func TestPingOptionsRejectBadSizes(t *testing.T) {
	for _, o := range []PingOptions{{Size: 40}, {Size: 1600}, {Size: 4000, MTU: 9000}, {Count: -1}} {
		assert.Errorf(t, o.setDefaults(), "%+v accepted", o)
	}
	o := PingOptions{}
	if assert.NoError(t, o.setDefaults()) {
		assert.Equal(t, PingOptions{Size: WriteLatFrame, Count: 5000, Warmup: 500, MTU: 1500}, PingOptions{Size: o.Size, Count: o.Count, Warmup: o.Warmup, MTU: o.MTU}, "defaults")
	}
	assert.Equal(t, 82, WriteLatFrame, "8-byte WRITE ONLY frame")
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
	require.Equal(t, want, f, "swapped frame")
}

func TestHalfStats(t *testing.T) {
	rtts := make([]time.Duration, 100)
	for i := range rtts {
		rtts[i] = time.Duration(200-2*i) * time.Microsecond // 200, 198, ..., 2
	}
	med, p99, lo, hi, mean := halfStats(rtts)
	require.Equal(t, []time.Duration{51 * time.Microsecond, 100 * time.Microsecond, time.Microsecond, 100 * time.Microsecond, 50500 * time.Nanosecond},
		[]time.Duration{med, p99, lo, hi, mean}, "median, p99, min, max, mean")
}
