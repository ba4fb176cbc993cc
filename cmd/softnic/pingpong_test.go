package main

import (
	"bytes"
	"regexp"
	"testing"
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
		if !local.MatchString(out) || !remote.MatchString(out) || !rate.MatchString(out) || bytes.Contains([]byte(out), []byte("invalid data")) {
			t.Errorf("%s output:\n%s", side, out)
		}
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
		if st := run(args, &o, &e); st == 0 {
			t.Errorf("%q: status 0, want failure", args)
		}
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
		if !rate.MatchString(out) || bytes.Contains([]byte(out), []byte("invalid data")) {
			t.Errorf("%s output:\n%s", side, out)
		}
	}
	// 300 messages of 5 packets (MTU 1024), each with its acknowledgement:
	// no retransmission, no RNR NAK.
	if !regexp.MustCompile(`(?m)^ softnic engine counters:\n  RxPackets +1800$`).MatchString(cout) {
		t.Errorf("client counters:\n%s", cout)
	}
	if bytes.Contains([]byte(sout), []byte("softnic engine counters")) {
		t.Errorf("server printed counters it was not asked for:\n%s", sout)
	}
}
