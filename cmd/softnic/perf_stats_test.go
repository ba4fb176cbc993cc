package main

import (
	"regexp"
	"strconv"
	"testing"
)

func TestPerfSoftnicStats(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "write_bw", "-d", "memA", "-p", port, "-n", "20", "--softnic-stats"},
		[]string{"perf", "write_bw", "-d", "memB", "-p", port, "-n", "20", "-s", "4096", "127.0.0.1"})
	if regexp.MustCompile(`softnic (engine|RoCE)`).MatchString(cout) {
		t.Errorf("client printed counters without --softnic-stats:\n%s", cout)
	}
	// The server received 20 writes of 4096 bytes at IB MTU 4096 (the
	// memory link's 9000-byte MTU): at least 20 packets, after the table.
	table := regexp.MustCompile(`(?m)^ 4096 +20 +`).FindStringIndex(sout)
	m := regexp.MustCompile(`(?m)^ softnic engine counters:\n(?:  \S+ +\d+\n)*?  RxPackets +(\d+)\n`).FindStringSubmatchIndex(sout)
	if table == nil || m == nil || m[0] < table[1] {
		t.Fatalf("want the counters after the result line:\n%s", sout)
	}
	if n, _ := strconv.Atoi(sout[m[2]:m[3]]); n < 20 {
		t.Errorf("RxPackets %d, want at least 20", n)
	}
	for _, name := range []string{"Retransmits", "Timeouts", "RxOutOfSeq", "RxDuplicate", "TxNAKSeq", "Rx.Good", "Rx.BadICRC"} {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + ` +\d+$`).MatchString(sout) {
			t.Errorf("no %s line:\n%s", name, sout)
		}
	}
}
