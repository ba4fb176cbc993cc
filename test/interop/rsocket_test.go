package interop

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// rstreamArgs and udpongArgs are both sides' options in
// TestInteropRsocket: rstream verifies every byte (-T v); udpong runs
// bandwidth (no echo: its 1 ms echo timeout, which a TCG guest's round
// trip exceeds, makes its echo mode livelock, see the system tests'
// udpongPair), 1000-byte datagrams, which with the 8-byte ds_header fit
// rxe's path MTU of 1024.
const (
	rstreamArgs = "-S 4096 -C 100 -T v"
	udpongArgs  = "-S 1000 -C 2000"
)

// rsocketScript is the guest's side of TestInteropRsocket: first udpong
// against itself on rxe (rdma-core's datagram rsockets on rxe alone,
// marked OK or BROKEN; the udpong runs with softnic are left out when
// broken), then rstream and
// udpong clients of softnic's servers (again while softnic's server is
// not up: rconnect refused, or udpong's first datagram answered by
// ICMP), then rstream and udpong servers for softnic's clients, each
// marked up on the console. udpong's server serves for ever: it is
// stopped once the host opens TCP port 5993.
const rsocketScript = `mark() { echo "<3>rxeguest-mark: $1" >/dev/kmsg; }
again() {
	n=0
	while :; do
		out=$(timeout 120 "$@" 2>&1); st=$?
		case "$out" in *"Connection refused"*) n=$((n+1)); [ $n -lt 60 ] && { sleep 1; continue; } ;; esac
		echo "$out"; return $st
	done
}
timeout 60 udpong -b 10.77.0.11 -p 7175 >/tmp/lo.out 2>&1 &
lp=$!
sleep 1
timeout 30 udpong -s 10.77.0.11 -p 7175 -S 100 -C 10 >/tmp/lc.out 2>&1
ls=$?
kill $lp
echo "@@ rxe loopback udpong status $ls"
cat /tmp/lc.out
if [ $ls -eq 0 ]; then ud=1; mark UDPONG-RXE-OK; else ud=; mark UDPONG-RXE-BROKEN; fi
again rstream -s 10.77.0.1 ` + rstreamArgs + `
echo "@@ rstream client status $?"
if [ -n "$ud" ]; then
	again udpong -s 10.77.0.1 ` + udpongArgs + `
	echo "@@ udpong client status $?"
	mark UDPONG-CLIENT-DONE
fi
timeout 150 rstream -b 10.77.0.11 ` + rstreamArgs + ` >/tmp/rs.out 2>&1 &
rp=$!
sleep 1; mark RSTREAM-UP
wait $rp
echo "@@ rstream server status $?"
cat /tmp/rs.out
[ -n "$ud" ] || exit 0
timeout 150 udpong -b 10.77.0.11 >/tmp/ud.out 2>&1 &
up=$!
sleep 1; mark UDPONG-UP
n=0
until nc 10.77.0.1 5993 </dev/null >/dev/null 2>&1; do n=$((n+1)); [ $n -gt 150 ] && break; sleep 1; done
kill $up; wait $up
echo "@@ udpong server"
cat /tmp/ud.out
`

// TestInteropRsocket runs Debian's rstream (stream rsockets: RC, rdma-core's
// rs_conn_data and WRITE WITH IMMEDIATE messages) and udpong (datagram
// rsockets: UDP first, then UD with the ds_header) between softnic,
// through the daemon as nobody (softnic exec, softnic's librdmacm), and
// rdma_rxe's rdma-core, both ways: rxe's clients against softnic's
// servers, then softnic's clients against rxe's servers.
func TestInteropRsocket(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	e := prepareInterop(t, ctx, "snrs", interopPlan{}, rxeguest.Release{})
	e.startDaemon()
	g, err := rxeguest.Start(ctx, e.img, rxeguest.Config{Name: "snrs-peer", NetNS: e.net.BridgeNS, Tap: e.net.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: rsocketScript, ScriptTimeout: 12 * time.Minute, MemoryMiB: 1024})
	require.NoError(t, err)
	mark := func(m string, within time.Duration) bool {
		return assert.Eventuallyf(t, func() bool { return g.ConsoleContains(m) }, within, 200*time.Millisecond, "guest mark %s", m)
	}
	exec := func(timeout time.Duration, argv ...string) (string, error) {
		return e.softnic(timeout, append([]string{"exec", "--"}, argv...)...)
	}

	// softnic serves: rstream ends after its one client; udpong serves
	// until the guest's client is done.
	rsSrv, rsSrvErr := exec(5*time.Minute, append([]string{"rstream", "-b", "10.77.0.1"}, strings.Fields(rstreamArgs)...)...)
	require.Eventually(t, func() bool { return g.ConsoleContains("UDPONG-RXE-OK") || g.ConsoleContains("UDPONG-RXE-BROKEN") },
		4*time.Minute, 200*time.Millisecond, "the guest's own udpong")
	udpong := g.ConsoleContains("UDPONG-RXE-OK")
	var udSrvOut string
	if udpong {
		dir, err := os.MkdirTemp("", "softnic-interop-rs-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.NoError(t, os.Chmod(dir, 0o777))
		stop := filepath.Join(dir, "stop")
		udSrv := make(chan string, 1)
		go func() {
			// udpong serves until stop exists.
			out, _ := exec(5*time.Minute, "sh", "-c", `stdbuf -oL udpong -b 10.77.0.1 & p=$!
while [ ! -e "$0" ]; do sleep 0.2; done; kill $p`, stop)
			udSrv <- out
		}()
		mark("UDPONG-CLIENT-DONE", 4*time.Minute)
		require.NoError(t, os.WriteFile(stop, nil, 0o644))
		udSrvOut = <-udSrv
	}

	// softnic's clients.
	mark("RSTREAM-UP", 2*time.Minute)
	rsCli, rsCliErr := exec(3*time.Minute, append([]string{"rstream", "-s", "10.77.0.11"}, strings.Fields(rstreamArgs)...)...)
	for n := 0; rsCliErr != nil && strings.Contains(rsCli, "Connection refused") && n < 30; n++ {
		time.Sleep(time.Second) // the guest's server does not listen yet
		rsCli, rsCliErr = exec(3*time.Minute, append([]string{"rstream", "-s", "10.77.0.11"}, strings.Fields(rstreamArgs)...)...)
	}
	var udCli string
	var udCliErr error
	if udpong {
		mark("UDPONG-UP", 3*time.Minute)
		udCli, udCliErr = exec(3*time.Minute, append([]string{"udpong", "-s", "10.77.0.11"}, strings.Fields(udpongArgs)...)...)
		ln, err := listenIn(e.net.PeerNS, "10.77.0.1:5993")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	res, werr := g.Wait()
	require.NoError(t, werr)
	out := res.Output
	t.Logf("guest:\n%s\nsoftnic rstream server:\n%s\nsoftnic udpong server:\n%s\nsoftnic rstream client:\n%s\nsoftnic udpong client:\n%s",
		out, rsSrv, udSrvOut, rsCli, udCli)

	custom := regexp.MustCompile(`(?m)^custom\s+\S+\s+(\S+)\s`)
	checkRow := func(who, text, transfers string) {
		m := custom.FindStringSubmatch(text)
		if assert.NotNilf(t, m, "%s printed no result row:\n%s", who, text) && transfers != "" {
			assert.Equalf(t, transfers, m[1], "%s's transfers", who)
		}
	}
	// rstream: rxe's client and softnic's server, then softnic's client
	// and rxe's server.
	assert.Contains(t, out, "@@ rstream client status 0", "rxe's rstream against softnic's")
	assert.NoError(t, rsSrvErr, "softnic's rstream server:\n%s", rsSrv)
	checkRow("softnic's rstream server", rsSrv, "100")
	assert.NoError(t, rsCliErr, "softnic's rstream client:\n%s", rsCli)
	checkRow("softnic's rstream client", rsCli, "100")
	assert.Contains(t, out, "@@ rstream server status 0", "rxe's rstream server")
	if !udpong {
		t.Logf("udpong left out: rdma-core's datagram rsockets fail on rxe by themselves (the guest's own udpong above)")
		return
	}
	assert.Contains(t, out, "@@ udpong client status 0", "rxe's udpong against softnic's")
	assert.Contains(t, udSrvOut, "client login from 10.77.0.11", "softnic's udpong server")
	// (rxe's udpong server is killed, its buffered output lost: softnic's
	// client's row needs its answers to the start and the end.)
	assert.NoError(t, udCliErr, "softnic's udpong client:\n%s", udCli)
	checkRow("softnic's udpong client", udCli, "")
}
