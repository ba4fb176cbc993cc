package system

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
)

// servedVeth is a veth pair between two namespaces with a softnic daemon
// on each end, and the binary where every user may run it.
type servedVeth struct {
	bin     string
	p       *netnstest.Pair
	runDir  string
	daemons [2]*systest.Daemon
	logs    [2]*syncbuf.Buffer
	// ia and ib are the GID indexes of the ends' IPv4 addresses.
	ia, ib string
	// lastStat is the last softnic stat output countersOf read.
	lastStat string
}

func newServedVeth(t *testing.T) *servedVeth {
	return newServedVethConfig(t, netnstest.Config{MTU: 1500}, nil)
}

// newServedVethConfig is newServedVeth with the pair built as cfg says
// and end A's daemon given the flags extraA.
func newServedVethConfig(t *testing.T, cfg netnstest.Config, extraA []string) *servedVeth {
	w := systest.NewWorld(t, systest.Config{Net: cfg, Args: [2][]string{extraA, nil}})
	return &servedVeth{bin: w.Bin, p: w.Pair, runDir: w.RunDir, daemons: [2]*systest.Daemon{w.A, w.B},
		logs: [2]*syncbuf.Buffer{w.A.Log, w.B.Log},
		ia:   indexOf(w.GIDs[0], w.Pair.A.Addr4()), ib: indexOf(w.GIDs[1], w.Pair.B.Addr4())}
}

// asNobody returns the command that runs softnic with args as user nobody
// in end's namespace, finding the daemons through $SOFTNIC_RUN_DIR.
// setpriv and ip netns exec exec: the command's pid is softnic's.
func (v *servedVeth) asNobody(end *netnstest.End, args ...string) *exec.Cmd {
	argv := systest.AsUser(systest.Nobody, append([]string{v.bin}, args...)...)
	cmd := end.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+v.runDir)
	return cmd
}

// toolPair is a tool's server on end A and its client on end B.
type toolPair struct{ name, server, client string }

// run runs the pair's server and client (the client aimed at A) and
// returns their outputs; a failed side's output starts with FAILED.
func (v *servedVeth) run(r toolPair) [2]string {
	sc := v.asNobody(&v.p.A, append(strings.Fields(r.server), "-d", v.p.A.Ifname)...)
	var sout []byte
	var serr error
	done := make(chan struct{})
	go func() { sout, serr = sc.CombinedOutput(); close(done) }()
	cc := v.asNobody(&v.p.B, append(strings.Fields(r.client), "-d", v.p.B.Ifname, "--connect-wait=20s", v.p.A.Addr4().String())...)
	cout, cerr := cc.CombinedOutput()
	<-done
	out := [2]string{string(sout), string(cout)}
	if serr != nil {
		out[0] = fmt.Sprintf("FAILED (%v) %s", serr, out[0])
	}
	if cerr != nil {
		out[1] = fmt.Sprintf("FAILED (%v) %s", cerr, out[1])
	}
	return out
}

// bwLine is perftest's result line of a bandwidth test: size, iterations,
// peak and average bandwidth (MB/sec), message rate (Mpps).
var bwLine = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)

// requireBWResult checks out's result line: its size, its iterations
// (iters 0: any, as with -D), a nonzero average and message rate that
// agree (average = size × rate, in MB of 2^20 bytes), and a peak of at
// least the average (perftest prints 0 where it has none: a send_bw
// server).
func requireBWResult(t *testing.T, what, out string, size, iters uint64) {
	t.Helper()
	m := bwLine.FindStringSubmatch(out)
	require.NotNil(t, m, "%s: no result line:\n%s", what, out)
	num := func(i int) float64 {
		f, err := strconv.ParseFloat(m[i], 64)
		require.NoError(t, err)
		return f
	}
	require.Equal(t, float64(size), num(1), "%s: size in %q", what, m[0])
	if iters > 0 {
		require.Equal(t, float64(iters), num(2), "%s: iterations in %q", what, m[0])
	}
	peak, avg, rate := num(3), num(4), num(5)
	require.Positive(t, avg, "%s: bandwidth in %q", what, m[0])
	require.Positive(t, rate, "%s: message rate in %q", what, m[0])
	want := float64(size) * rate * 1e6 / (1 << 20)
	require.LessOrEqual(t, math.Abs(avg-want), 0.03*want+0.01, "%s: bandwidth against size × rate in %q", what, m[0])
	if peak != 0 {
		require.GreaterOrEqual(t, peak, avg*0.99, "%s: peak in %q", what, m[0])
	}
}

// TestToolsThroughDaemon runs softnic perf's four bandwidth tests, a
// latency test and softnic pingpong as user nobody through daemons on both
// veth ends, six pairs at once on the one pair of interfaces (without
// daemons, the second tool on an interface could not attach), and checks
// every side's figures.
func TestToolsThroughDaemon(t *testing.T) {
	v := newServedVeth(t)
	ia, ib := v.ia, v.ib
	runs := []toolPair{
		{"write_bw", "perf write_bw -x " + ia + " -n 400 -p 18601", "perf write_bw -x " + ib + " -n 400 -p 18601"},
		{"read_bw", "perf read_bw -x " + ia + " -n 400 -p 18604", "perf read_bw -x " + ib + " -n 400 -p 18604"},
		{"send_bw", "perf send_bw -x " + ia + " -n 400 -p 18605", "perf send_bw -x " + ib + " -n 400 -p 18605"},
		{"atomic_bw", "perf atomic_bw -x " + ia + " -n 400 -p 18606", "perf atomic_bw -x " + ib + " -n 400 -p 18606"},
		{"pingpong", "pingpong -g " + ia + " -n 200 -p 18602", "pingpong -g " + ib + " -n 200 -p 18602"},
		{"write_lat", "perf write_lat -x " + ia + " -n 300 -p 18603", "perf write_lat -x " + ib + " -n 300 -p 18603"},
	}
	outs := make([][2]string, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() { outs[i] = v.run(r) })
	}
	wg.Wait()
	for i, r := range runs {
		require.False(t, strings.HasPrefix(outs[i][0], "FAILED") || strings.HasPrefix(outs[i][1], "FAILED"),
			"%s through the daemon:\nserver:\n%s\nclient:\n%s\ndaemon:\n%s", r.name, outs[i][0], outs[i][1], v.logs[0].String())
	}
	for i, size := range []uint64{65536, 65536, 65536, 8} {
		requireBWResult(t, runs[i].name+" server", outs[i][0], size, 400)
		requireBWResult(t, runs[i].name+" client", outs[i][1], size, 400)
		t.Logf("%s: %s", runs[i].name, bwLine.FindString(outs[i][1]))
	}
	require.Contains(t, outs[4][0], "1638400 bytes in ", "pingpong server")
	require.Contains(t, outs[4][1], "1638400 bytes in ", "pingpong client")
	require.Regexp(t, regexp.MustCompile(`(?m)^ 2       300 `), outs[5][0], "write_lat server")
	for _, l := range v.logs {
		require.Eventually(t, func() bool { return strings.Count(l.String(), "session ended") == len(runs) }, 5*time.Second,
			10*time.Millisecond, "every tool's session ends:\n%s", l.String())
	}
}
