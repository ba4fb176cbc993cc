package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPingpongClientServer(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"pingpong", "-c", "-d", "memA", "-g", "0", "-p", port, "-n", "200", "-s", "1000"},
		[]string{"pingpong", "-c", "-d", "memB", "-g", "0", "-p", port, "-n", "200", "-s", "1000", "127.0.0.1"})
	local := regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:10\.0\.0\.[12]$`)
	remote := regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:10\.0\.0\.[12]$`)
	rate := regexp.MustCompile(`(?m)^400000 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Regexp(t, local, out, side)
		assert.Regexp(t, remote, out, side)
		assert.Regexp(t, rate, out, side)
		assert.NotContains(t, out, "invalid data", side)
	}
}

func TestPingpongBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"pingpong"},
		{"pingpong", "-d", "x", "-m", "1500"},
		{"pingpong", "-d", "x", "-i", "2"},
		{"pingpong", "-d", "x", "a", "b"},
	} {
		var o, e bytes.Buffer
		assert.NotZero(t, run(args, &o, &e), "%q: want failure", args)
	}
}

// TestPingpongEvents runs the -e mode, which sleeps on completion events
// instead of polling, on both sides, with a small receive queue so that
// receives are reposted many times; the client prints softnic's counters.
func TestPingpongEvents(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"pingpong", "-c", "-e", "-d", "memA", "-g", "0", "-p", port, "-n", "300", "-s", "5000", "-r", "4"},
		[]string{"pingpong", "-c", "--events", "-d", "memB", "-g", "0", "-p", port, "-n", "300", "-s", "5000", "-r", "4", "--softnic-stats", "127.0.0.1"})
	rate := regexp.MustCompile(`(?m)^3000000 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n300 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Regexp(t, rate, out, side)
		assert.NotContains(t, out, "invalid data", side)
	}
	// 300 messages of 5 packets (MTU 1024), each with its acknowledgement:
	// no retransmission, no RNR NAK.
	assert.Regexp(t, `(?m)^ softnic engine counters:\n  RxPackets +1800$`, cout, "client counters")
	assert.NotContains(t, sout, "softnic engine counters", "server printed counters it was not asked for")
}

// TestPingpongTimestamps runs -t on both sides: rc_pingpong's three
// lines of device clock ticks between receive completions, which the
// engine stamps as it makes them, ordered min <= average <= max.
func TestPingpongTimestamps(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"pingpong", "-t", "-d", "memA", "-g", "0", "-p", port, "-n", "200"},
		[]string{"pingpong", "--ts", "-d", "memB", "-g", "0", "-p", port, "-n", "200", "127.0.0.1"})
	lines := regexp.MustCompile(`(?m)^200 iters in .*
Max receive completion clock cycles = (\d+)
` +
		`Min receive completion clock cycles = (\d+)
Average receive completion clock cycles = ([0-9.]+)$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		m := lines.FindStringSubmatch(out)
		if !assert.NotNil(t, m, "%s:\n%s", side, out) {
			continue
		}
		hi, _ := strconv.ParseFloat(m[1], 64)
		lo, _ := strconv.ParseFloat(m[2], 64)
		avg, _ := strconv.ParseFloat(m[3], 64)
		assert.Greater(t, hi, 0.0, side)
		assert.LessOrEqual(t, lo, avg, side)
		assert.LessOrEqual(t, avg, hi, side)
	}
}

// TestPingpongUD runs the --ud mode (ibv_ud_pingpong) on both sides, with
// -c: each message travels behind the GRH's room, and ud_pingpong's
// address lines (a colon before the local GID) come out.
func TestPingpongUD(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"pingpong", "--ud", "-c", "-d", "memA", "-g", "0", "-p", port, "-n", "200", "-r", "8"},
		[]string{"pingpong", "--ud", "-c", "-d", "memB", "-g", "0", "-p", port, "-n", "200", "-r", "8", "127.0.0.1"})
	local := regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:10\.0\.0\.[12]$`)
	rate := regexp.MustCompile(`(?m)^409600 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Regexp(t, local, out, side)
		assert.Regexp(t, rate, out, side)
		assert.NotContains(t, out, "invalid data", side)
	}
}

// TestPingpongUDTooLarge checks ud_pingpong's refusal of messages larger
// than the port's active MTU.
func TestPingpongUDTooLarge(t *testing.T) {
	useMemDevices(t)
	var o, e bytes.Buffer
	assert.NotZero(t, run([]string{"pingpong", "--ud", "-d", "memA", "-s", "5000"}, &o, &e))
	assert.Contains(t, e.String(), "Requested size larger than port MTU (4096)")
}

// TestPingpongUC runs the --uc mode (ibv_uc_pingpong) on both sides with
// -c and messages of several packets.
func TestPingpongUC(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"pingpong", "--uc", "-c", "-d", "memA", "-g", "0", "-p", port, "-n", "200", "-r", "8", "-s", "10000", "-m", "1024"},
		[]string{"pingpong", "--uc", "-c", "-d", "memB", "-g", "0", "-p", port, "-n", "200", "-r", "8", "-s", "10000", "-m", "1024", "--softnic-stats", "127.0.0.1"})
	local := regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:10\.0\.0\.[12]$`)
	rate := regexp.MustCompile(`(?m)^4000000 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)
	for side, out := range map[string]string{"server": sout, "client": cout} {
		assert.Regexp(t, local, out, side)
		assert.Regexp(t, rate, out, side)
		assert.NotContains(t, out, "invalid data", side)
	}
	// 200 messages of ten packets, and no ACKs.
	assert.Regexp(t, `(?m)^  RxPackets +2000$`, cout, "client counters")
}

// TestPingpongUDAndUC: the two modes exclude each other.
func TestPingpongUDAndUC(t *testing.T) {
	useMemDevices(t)
	var o, e bytes.Buffer
	assert.NotZero(t, run([]string{"pingpong", "--ud", "--uc", "-d", "memA"}, &o, &e))
	assert.Contains(t, e.String(), "UD and UC: choose one")
}
