package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPerfSoftnicStats(t *testing.T) {
	useMemDevices(t)
	port := freePort(t)
	sout, cout := runPair(t,
		[]string{"perf", "write_bw", "-d", "memA", "-p", port, "-n", "20", "--softnic-stats"},
		[]string{"perf", "write_bw", "-d", "memB", "-p", port, "-n", "20", "-s", "4096", "127.0.0.1"})
	assert.NotRegexp(t, `softnic (engine|RoCE)`, cout, "client printed counters without --softnic-stats")
	// The server received 20 writes of 4096 bytes at IB MTU 4096 (the
	// memory link's 9000-byte MTU): at least 20 packets, after the table.
	table := regexp.MustCompile(`(?m)^ 4096 +20 +`).FindStringIndex(sout)
	m := regexp.MustCompile(`(?m)^ softnic engine counters:\n(?:  \S+ +\d+\n)*?  RxPackets +(\d+)\n`).FindStringSubmatchIndex(sout)
	require.True(t, table != nil && m != nil && m[0] >= table[1], "want the counters after the result line:\n%s", sout)
	n, _ := strconv.Atoi(sout[m[2]:m[3]])
	assert.GreaterOrEqual(t, n, 20, "RxPackets")
	for _, name := range []string{"Retransmits", "Timeouts", "RxOutOfSeq", "RxDuplicate", "TxNAKSeq", "Rx.Good", "Rx.BadICRC"} {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(name)+` +\d+$`, sout, "no %s line", name)
	}
}
