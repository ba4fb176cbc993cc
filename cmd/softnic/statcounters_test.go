package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/counters"
)

// statLine matches one line of softnic stat: the device, with --qp the QP,
// then the counters, rxe's first.
var statLine = regexp.MustCompile(`^link (softnic_\w+)/1( lqpn \d+)? sent_pkts \d+ rcvd_pkts \d+ duplicate_request \d+ ( \w+ \d+)*`)

// softnic stat prints the devices' counters in rdma statistic show's
// layout, as JSON with -j, one QP's with --qp, and their rates with -w.
func TestStatCommand(t *testing.T) {
	dir, c := serveMemAB(t)
	pd, err := c.AllocPD()
	require.NoError(t, err)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	qp, err := c.CreateQP(hostifQP(pd, cq.Handle))
	require.NoError(t, err)

	stat := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		status := runStat(append(args, "--run-dir", dir), &out, &errOut)
		return out.String(), errOut.String(), status
	}
	out, errOut, status := stat()
	require.Zero(t, status, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	for i, dev := range []string{"softnic_memA", "softnic_memB"} {
		m := statLine.FindStringSubmatch(lines[i])
		require.NotNil(t, m, lines[i])
		require.Equal(t, dev, m[1])
		require.Contains(t, lines[i], " rdma_recvs 0 ", "rxe's counters, then softnic's")
		require.Contains(t, lines[i], " rx_bad_icrc 0 ")
	}

	out, errOut, status = stat("-j", "-d", "memB")
	require.Zero(t, status, errOut)
	var js []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &js), out)
	require.Len(t, js, 1)
	require.Equal(t, "softnic_memB", js[0]["ifname"])
	require.EqualValues(t, 1, js[0]["ifindex"])
	require.EqualValues(t, 1, js[0]["port"])
	require.Contains(t, js[0], "completer_retry_err")
	require.True(t, strings.HasPrefix(out, `[{"ifindex":1,"ifname":"softnic_memB","port":1,"sent_pkts":`), out)

	out, errOut, status = stat("--qp", fmt.Sprint(qp.QPN))
	require.Zero(t, status, errOut)
	require.Regexp(t, fmt.Sprintf(`^link softnic_memA/1 lqpn %d sent_pkts 0 rcvd_pkts 0 `, qp.QPN), out, "memB has no such QP: no line")
	require.Equal(t, 1, strings.Count(out, "\n"), out)
	out, errOut, status = stat("--qp", fmt.Sprint(qp.QPN), "-j", "-d", "memA")
	require.Zero(t, status, errOut)
	require.True(t, strings.HasPrefix(out, fmt.Sprintf(`[{"ifindex":0,"ifname":"softnic_memA","port":1,"lqpn":%d,"sent_pkts":0,`, qp.QPN)), out)

	_, errOut, status = stat("--qp", "16777000", "-d", "memA")
	require.Equal(t, 1, status)
	require.Contains(t, errOut, "no QP 16777000 on softnic_memA")

	out, errOut, status = stat("-w", "0.05", "-c", "2")
	require.Zero(t, status, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	for _, l := range lines {
		require.Regexp(t, statLine, l)
	}

	_, errOut, status = stat("-d", "memC")
	require.Equal(t, 1, status)
	require.Contains(t, errOut, `no device or interface "memC" here; `)
	for _, bad := range [][]string{{"extra"}, {"-w", "-1"}, {"-c", "-2"}, {"--qp", "-5"}, {"--qp", "16777216"}} {
		_, _, status = stat(bad...)
		require.Equal(t, 2, status, "%v", bad)
	}
	empty := t.TempDir()
	var eout, eerr bytes.Buffer
	require.Equal(t, 1, runStat([]string{"--run-dir", empty}, &eout, &eerr))
	require.Contains(t, eerr.String(), "no daemon runs")
}

// perSecond divides each change by the interval; a counter that went
// down or is new reads 0; a device without the QP stays without.
func TestStatPerSecond(t *testing.T) {
	prev := [][]counters.Counter{{{Name: "a", Value: 10}, {Name: "b", Value: 50}}, nil}
	cur := [][]counters.Counter{{{Name: "a", Value: 30}, {Name: "b", Value: 5}, {Name: "c", Value: 9}}, nil}
	got := perSecond(prev, cur, 2*time.Second)
	require.Equal(t, [][]counters.Counter{{{Name: "a", Value: 10}, {Name: "b"}, {Name: "c"}}, nil}, got)
}
