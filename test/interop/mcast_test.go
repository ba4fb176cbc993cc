package interop

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/test/interop/rxeguest"
)

// mckeyGroup is the IPv4 group both sides join (RoCEv2 MGID
// ::ffff:239.47.0.20, MAC 01:00:5e:2f:00:14).
const mckeyGroup = "239.47.0.20"

// mckeyScript is the guest's side of TestInteropMckey: first a receiver,
// marked up on the console once its join shows on eth0, while softnic
// sends; then, once softnic's receiver has joined (the host opens TCP
// port 5999 then), a sender. mckey sends its ten datagrams once, three
// seconds after its join, so each sender starts only once the other side
// receives.
const mckeyScript = `G=` + mckeyGroup + `
timeout 120 mckey -m $G -b 10.77.0.11 >/tmp/recv.out 2>&1 &
rp=$!
n=0
until ip maddr show dev eth0 | grep -q "$G"; do n=$((n+1)); [ $n -gt 300 ] && break; sleep 0.2; done
echo "<3>rxeguest-mark: RECEIVER-UP" >/dev/kmsg
wait $rp
echo "@@ receiver status $?"
cat /tmp/recv.out
n=0
until nc 10.77.0.1 5999 </dev/null >/dev/null 2>&1; do n=$((n+1)); [ $n -gt 120 ] && break; sleep 1; done
timeout 120 mckey -m $G -b 10.77.0.11 -s
echo "@@ sender status $?"
`

// TestInteropMckey runs Debian's mckey between softnic, through the daemon
// as nobody (softnic exec, softnic's librdmacm), and rdma_rxe, both ways:
// rxe receives what softnic sends to the group, then softnic what rxe
// sends. Both joins go out as IGMP on the link, as a switch needs them.
func TestInteropMckey(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := prepareInterop(t, ctx, "snmck", interopPlan{}, rxeguest.Release{})
	e.startDaemon()
	g, err := rxeguest.Start(ctx, e.img, rxeguest.Config{Name: "snmck-peer", NetNS: e.net.BridgeNS, Tap: e.net.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: mckeyScript, ScriptTimeout: 6 * time.Minute, MemoryMiB: 1024})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return g.ConsoleContains("RECEIVER-UP") }, 4*time.Minute, 200*time.Millisecond,
		"the guest's receiver did not join")
	sent, err := e.softnic(2*time.Minute, "exec", "--", "mckey", "-m", mckeyGroup, "-b", "10.77.0.1", "-s")
	require.NoError(t, err, "softnic's sender:\n%s", sent)
	assert.Contains(t, sent, "joined dgid: ::ffff:"+mckeyGroup)

	// softnic's receiver, then the go-ahead for the guest's sender.
	recv := &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		out, err := e.softnic(3*time.Minute, "exec", "--", "mckey", "-m", mckeyGroup, "-b", "10.77.0.1")
		recv.Write([]byte(out))
		done <- err
	}()
	require.Eventually(t, func() bool { return joined(e.net.PeerNS, e.net.PeerLink, mckeyGroup) }, time.Minute,
		100*time.Millisecond, "softnic's receiver did not join %s on %s", mckeyGroup, e.net.PeerLink)
	ln, err := listenIn(e.net.PeerNS, "10.77.0.1:5999")
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
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	assert.NoError(t, err, "softnic's receiver:\n%s", recv.String())
	res, werr := g.Wait()
	require.NoError(t, werr)
	t.Logf("guest:\n%s\nsoftnic sent:\n%s\nsoftnic received:\n%s", res.Output, sent, recv.String())
	assert.Contains(t, res.Output, "@@ receiver status 0", "rxe received softnic's datagrams")
	assert.Contains(t, res.Output, "@@ sender status 0")
	assert.Contains(t, recv.String(), "test complete", "softnic received rxe's datagrams")
	assert.False(t, joined(e.net.PeerNS, e.net.PeerLink, mckeyGroup), "the group is left when mckey ends")
}

// joined reports whether link in namespace ns has joined group (ip maddr).
func joined(ns, link, group string) bool {
	out, _ := exec.Command("ip", "netns", "exec", ns, "ip", "maddr", "show", "dev", link).Output()
	return strings.Contains(string(out), group)
}

// listenIn listens on TCP addr in network namespace ns.
func listenIn(ns, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		return nil, err
	}
	defer netns.Set(orig)
	return net.Listen("tcp4", addr)
}
