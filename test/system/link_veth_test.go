package system

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/internal/systest"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// linkNet is the pair these tests make: 10.93.0.0/24 and fd93::/64.
func linkNet(mtu int) netnstest.Config {
	return netnstest.Config{MTU: mtu,
		AddrsA: []netip.Prefix{netip.MustParsePrefix("10.93.0.1/24"), netip.MustParsePrefix("fd93::1/64")},
		AddrsB: []netip.Prefix{netip.MustParsePrefix("10.93.0.2/24"), netip.MustParsePrefix("fd93::2/64")}}
}

// queryPort asks d's device for its port through a session of its own.
func queryPort(t *testing.T, d *systest.Daemon) hostif.QueryPortReply {
	t.Helper()
	c, err := session.Dial(d.Sock)
	require.NoError(t, err)
	defer c.Close()
	p, err := c.QueryPort()
	require.NoError(t, err)
	return p
}

// gidTable reads d's GID table through a session: each entry's address,
// the zero address for an empty one, up to the last that holds a GID.
func gidTable(t *testing.T, d *systest.Daemon) []netip.Addr {
	t.Helper()
	c, err := session.Dial(d.Sock)
	require.NoError(t, err)
	defer c.Close()
	p, err := c.QueryPort()
	require.NoError(t, err)
	var table []netip.Addr
	n := 0
	for i := 0; i < int(p.GIDTableLen); i++ {
		g, err := c.QueryGID(i)
		if errors.Is(err, ibv.ErrEmptyGID) {
			table = append(table, netip.Addr{})
			continue
		}
		require.NoError(t, err, "GID %d", i)
		table = append(table, roce.AddrFromGID(g))
		n = len(table)
	}
	return table[:n]
}

// sysfsGID is a as a GID file holds it (the zero GID for an empty entry):
// eight groups of four hex digits.
func sysfsGID(a netip.Addr) string {
	b := netip.IPv6Unspecified().As16()
	if a.IsValid() {
		b = roce.GIDFromAddr(a)
	}
	var g []string
	for i := 0; i < 16; i += 2 {
		g = append(g, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(g, ":")
}

// rtrQP makes an RC QP on dev and takes it to RTR with path MTU mtu,
// aimed at peer's IPv4 GID (GID 1 on both sides).
func rtrQP(t *testing.T, dev *verbs.Device, peer *systest.Daemon, mtu verbs.MTU) *verbs.QP {
	t.Helper()
	cq, err := dev.CreateCQ(4, nil)
	require.NoError(t, err)
	qp, err := dev.AllocPD().CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1},
		verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	dgid := roce.GIDFromAddr(peer.End.Addr4())
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: 0x11, MaxDestRdAtomic: 1,
		MinRNRTimer: 12, AV: verbs.AddressVector{DGID: dgid, SGIDIndex: 1, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer), "path MTU %v", mtu)
	return qp
}

// setMTU sets end's interface's MTU.
func setMTU(t *testing.T, end *netnstest.End, mtu int) {
	t.Helper()
	out, err := end.Command("ip", "link", "set", end.Ifname, "mtu", fmt.Sprint(mtu)).CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestDaemonsFollowMTUChange changes both ends of a veth pair from MTU
// 1500 to 9000 under running daemons: each says so and its port shows
// active_mtu 4096 and link MTU 9000, and Debian's ib_write_bw with path
// MTU 4096 runs between them; back to 1500, both follow again, and a QP
// keeps the path MTU it was given.
func TestDaemonsFollowMTUChange(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install ibverbs-utils perftest libibverbs-dev librdmacm-dev gcc make", "cc", "make", "ib_write_bw")
	sw := systest.NewWorld(t, systest.Config{Provider: true, Net: linkNet(1500), AwaitGID: true})
	w := &providerWorld{bin: sw.Bin, runDir: sw.RunDir, a: &sw.Pair.A, b: &sw.Pair.B,
		daemons: []*systest.Daemon{sw.A, sw.B}, logs: []*syncbuf.Buffer{sw.A.Log, sw.B.Log}}
	for _, d := range []*systest.Daemon{sw.A, sw.B} {
		p := queryPort(t, d)
		require.Equal(t, uint8(ibv.MTU1024), p.ActiveMTU, "at MTU 1500")
		require.Equal(t, uint8(ibv.MTU4096), p.MaxMTU, "the daemon's frames carry IB MTU 4096 at any MTU")
	}

	dev, err := client.DialDevice(sw.A.Sock)
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	var old *verbs.QP
	for _, step := range []struct {
		from, to int
		active   ibv.MTU
	}{{1500, 9000, ibv.MTU4096}, {9000, 1500, ibv.MTU1024}} {
		for _, d := range []*systest.Daemon{sw.A, sw.B} {
			setMTU(t, d.End, step.to)
		}
		for _, d := range []*systest.Daemon{sw.A, sw.B} {
			d.AwaitLog(t, fmt.Sprintf(`msg="mtu changed" interface=%s old=%d new=%d active_mtu=%d`,
				d.End.Ifname, step.from, step.to, step.active.Bytes()), 30*time.Second)
			p := queryPort(t, d)
			assert.Equal(t, uint8(step.active), p.ActiveMTU, "%s at MTU %d", d.Name, step.to)
			assert.Equal(t, uint32(step.to), p.LinkMTU, "%s", d.Name)
		}
		if step.to != 9000 {
			// As on hardware: a QP keeps the path MTU modify_qp gave
			// it, and a path MTU above the active MTU is taken, as rxe
			// and mlx5 take any up to 4096.
			assert.Equal(t, verbs.MTU4096, old.Query().PathMTU, "a QP connected at MTU 9000")
			assert.Equal(t, verbs.MTU4096, rtrQP(t, dev, sw.B, verbs.MTU4096).Query().PathMTU, "a QP connected at MTU 1500")
			continue
		}
		old = rtrQP(t, dev, sw.B, verbs.MTU4096)
		args := []string{"ib_write_bw", "-x", "1", "-m", "4096", "-n", "500"}
		sout, cout := w.pair(t, 18515, args, args)
		for _, out := range []string{sout, cout} {
			assert.Regexp(t, `Mtu\s+: 4096\[B\]`, out)
			assert.Greater(t, perftestLast(t, out, 65536), 0.0, "no figure:\n%s", out)
		}
	}
}

// TestDaemonWaitsForItsInterface starts a daemon on an interface that is
// down and one on an interface that does not exist yet: each says once
// that it waits, and serves once the interface is up (set up; created and
// set up), its port ACTIVE.
func TestDaemonWaitsForItsInterface(t *testing.T) {
	netnstest.Integration(t)
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, linkNet(1500))
	runDir := systest.RootDir(t)
	run := func(end *netnstest.End, args ...string) {
		t.Helper()
		out, err := end.Command(args[0], args[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}

	run(&pair.A, "ip", "link", "set", pair.A.Ifname, "down")
	d := systest.LaunchDaemon(t, bin, &pair.A, pair.A.Ifname, runDir, "")
	d.AwaitLog(t, fmt.Sprintf(`msg="waiting for interface" interface=%s state=down`, pair.A.Ifname), 30*time.Second)
	run(&pair.A, "ip", "link", "set", pair.A.Ifname, "up")
	d.AwaitLog(t, "msg=serving", 30*time.Second)
	active := func(d *systest.Daemon) func() bool {
		return func() bool { return queryPort(t, d).State == 4 } // PORT_ACTIVE, once the carrier is seen
	}
	assert.Eventually(t, active(d), 30*time.Second, 20*time.Millisecond, "port state")

	late := systest.LaunchDaemon(t, bin, &pair.A, "lk2", runDir, "")
	late.AwaitLog(t, `msg="waiting for interface" interface=lk2 state=absent`, 30*time.Second)
	run(&pair.A, "ip", "link", "add", "lk2", "type", "veth", "peer", "name", "lk3")
	run(&pair.A, "ip", "addr", "add", "10.93.0.3/24", "dev", "lk2")
	run(&pair.A, "ip", "link", "set", "lk3", "up")
	run(&pair.A, "ip", "link", "set", "lk2", "up")
	late.AwaitLog(t, "msg=serving device=softnic_lk2 interface=lk2", 30*time.Second)
	assert.Eventually(t, active(late), 30*time.Second, 20*time.Millisecond, "port state")
	assert.Contains(t, gidTable(t, late), netip.MustParseAddr("10.93.0.3"))
	assert.Equal(t, 1, strings.Count(d.Log.String(), "waiting for interface"), "said once")
}

// TestDaemonFollowsAddresses adds addresses to a served interface and
// removes one: the GID table gains an entry at its first empty index (one
// past the end, then the removed one's) and loses the removed address's,
// the others' indexes unchanged; the daemon says each change, its
// clients get IBV_EVENT_GID_CHANGE, and a transfer to the added address
// runs.
func TestDaemonFollowsAddresses(t *testing.T) {
	sw := systest.NewWorld(t, systest.Config{Net: linkNet(1500), AwaitGID: true})
	d, end := sw.A, &sw.Pair.A
	before := gidTable(t, d)
	require.Equal(t, netip.MustParseAddr("10.93.0.1"), before[1], "GID 1: the IPv4 address")
	ip := func(args ...string) {
		t.Helper()
		out, err := end.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
	// A client of the device counts its IBV_EVENT_GID_CHANGEs: one per
	// change.
	dev, err := client.DialDevice(d.Sock)
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	var changes atomic.Int32
	go func() {
		for ev := range dev.Events() {
			if ev.Type == verbs.EventGIDChange && ev.Port == 1 {
				changes.Add(1)
			}
		}
	}()
	step := int32(0)
	awaitTable := func(want []netip.Addr) {
		t.Helper()
		assert.Eventually(t, func() bool { return fmt.Sprint(gidTable(t, d)) == fmt.Sprint(want) }, 30*time.Second,
			20*time.Millisecond, "want %v, have %v", want, gidTable(t, d))
		// The tree libibverbs programs read (ibv_query_gid) too.
		gidsDir := filepath.Join(d.RunDir, "sysfs", "class", "infiniband", d.Name, "ports", "1", "gids")
		for i, a := range want {
			file := filepath.Join(gidsDir, fmt.Sprint(i))
			assert.Eventually(t, func() bool {
				b, _ := os.ReadFile(file)
				return strings.TrimSpace(string(b)) == sysfsGID(a)
			}, 30*time.Second, 20*time.Millisecond, "%s: want %s", file, sysfsGID(a))
		}
		step++
		assert.Eventually(t, func() bool { return changes.Load() >= step }, 30*time.Second, 20*time.Millisecond,
			"GID_CHANGE events: %d after change %d", changes.Load(), step)
	}

	// 10.93.0.129/25 is no secondary address of 10.93.0.1/24, which
	// the kernel would remove with it.
	ip("addr", "add", "10.93.0.129/25", "dev", end.Ifname)
	want := append(append([]netip.Addr(nil), before...), netip.MustParseAddr("10.93.0.129"))
	d.AwaitLog(t, fmt.Sprintf(`msg="gid added" interface=%s index=%d addr=10.93.0.129`, end.Ifname, len(before)), 30*time.Second)
	awaitTable(want)
	// RoCEv2 to the new address reaches the device: the XDP program
	// steers it too.
	server := end.Command(sw.Bin, "perf", "write_bw", "-d", end.Ifname, "-x", fmt.Sprint(len(before)), "-s", "8192", "-n", "100")
	server.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+sw.RunDir)
	sdone := make(chan []byte, 1)
	go func() { out, _ := server.CombinedOutput(); sdone <- out }()
	client := sw.Pair.B.Command(sw.Bin, "perf", "write_bw", "-d", sw.Pair.B.Ifname, "-x", "1", "-s", "8192", "-n", "100",
		"--connect-wait=20s", "10.93.0.129")
	client.Env = server.Env
	cout, err := client.CombinedOutput()
	sout := <-sdone
	require.NoError(t, err, "client:\n%s\nserver:\n%s", cout, sout)
	requireBWResult(t, "server on the added address", string(sout), 8192, 100)

	ip("addr", "del", "10.93.0.1/24", "dev", end.Ifname)
	d.AwaitLog(t, fmt.Sprintf(`msg="gid removed" interface=%s index=1 addr=10.93.0.1`, end.Ifname), 30*time.Second)
	want[1] = netip.Addr{}
	awaitTable(want)

	// The first empty entry, whatever the family.
	ip("addr", "add", "fd93::11/64", "dev", end.Ifname)
	d.AwaitLog(t, fmt.Sprintf(`msg="gid added" interface=%s index=1 addr=fd93::11`, end.Ifname), 30*time.Second)
	want[1] = netip.MustParseAddr("fd93::11")
	awaitTable(want)
	assert.Equal(t, int32(3), changes.Load(), "one event per change")
}
