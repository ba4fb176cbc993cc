package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestToolsThroughDaemon runs softnic perf and softnic pingpong as user
// nobody through daemons on both veth ends, three pairs at once on the
// one pair of interfaces (without daemons, the second tool on an interface
// could not attach).
func TestToolsThroughDaemon(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	runDir := worldDir(t)
	open := filepath.Join(runDir, "softnic")
	self, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(open, self, 0o755))
	var logs [2]*syncBuffer
	_, logs[0] = startDaemon(t, open, &p.A, runDir)
	_, logs[1] = startDaemon(t, open, &p.B, runDir)
	dout := logs[0]
	ia, ib := indexOf(ga, p.A.Addr4()), indexOf(gb, p.B.Addr4())
	type run struct{ name, server, client string }
	runs := []run{
		{"write_bw", "perf write_bw -x " + ia + " -n 400 -p 18601", "perf write_bw -x " + ib + " -n 400 -p 18601"},
		{"pingpong", "pingpong -g " + ia + " -n 200 -p 18602", "pingpong -g " + ib + " -n 200 -p 18602"},
		{"write_lat", "perf write_lat -x " + ia + " -n 300 -p 18603", "perf write_lat -x " + ib + " -n 300 -p 18603"},
	}
	outs := make([][2]string, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			server := append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", open},
				strings.Fields(r.server)...)
			sc := p.A.Command(server[0], append(server[1:], "-d", p.A.Ifname)...)
			sc.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+runDir)
			var sout []byte
			var serr error
			done := make(chan struct{})
			go func() { sout, serr = sc.CombinedOutput(); close(done) }()
			client := append(strings.Fields(r.client), "-d", p.B.Ifname, "--connect-wait=20s", p.A.Addr4().String())
			cc := p.B.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", open}, client...)...)
			cc.Env = sc.Env
			cout, cerr := cc.CombinedOutput()
			<-done
			outs[i] = [2]string{string(sout), string(cout)}
			if serr != nil || cerr != nil {
				outs[i][0] = "FAILED " + outs[i][0]
			}
		})
	}
	wg.Wait()
	for i, r := range runs {
		require.False(t, strings.HasPrefix(outs[i][0], "FAILED"), "%s through the daemon:\nserver:\n%s\nclient:\n%s\ndaemon:\n%s",
			r.name, outs[i][0], outs[i][1], dout.String())
	}
	require.Regexp(t, regexp.MustCompile(`(?m)^ 65536      400 `), outs[0][1], "write_bw client")
	require.Regexp(t, regexp.MustCompile(`(?m)^ 65536      400 `), outs[0][0], "write_bw server")
	require.Contains(t, outs[1][0], "1638400 bytes in ", "pingpong server")
	require.Regexp(t, regexp.MustCompile(`(?m)^ 2       300 `), outs[2][0], "write_lat server")
	for _, l := range logs {
		require.Eventually(t, func() bool { return strings.Count(l.String(), "session ended") == 3 }, 5*time.Second,
			10*time.Millisecond, "every tool's session ends:\n%s", l.String())
	}
}
