package system

import (
	"fmt"
	"net/netip"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

func indexOf(gids []netip.Addr, a netip.Addr) string {
	for i, g := range gids {
		if g.Unmap() == a {
			return fmt.Sprint(i)
		}
	}
	return "-1"
}

// vethSoftnic builds softnic and makes a veth pair of 1500-byte MTU
// between two namespaces; it returns the binary, the pair and the GID
// tables of its ends once settled: link-local, IPv4, then the fd47::
// address (xdplink.GIDTable's order).
func vethSoftnic(t *testing.T) (string, *netnstest.Pair, []netip.Addr, []netip.Addr) {
	t.Helper()
	netnstest.Integration(t)
	bin := systest.Softnic(t)
	p := netnstest.NewT(t, netnstest.Config{MTU: 1500})
	return bin, p, systest.SettledGIDs(t, &p.A, 3), systest.SettledGIDs(t, &p.B, 3)
}

// runVethPair runs softnic (bin) with the server's arguments in p's
// namespace A and the client's, aimed at A's IPv4 address, in B, and
// returns their outputs; both must succeed.
func runVethPair(t *testing.T, p *netnstest.Pair, bin, name string, server, client []string) (string, string) {
	t.Helper()
	var sout []byte
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cmd := p.A.Command(bin, server...)
		sout, serr = cmd.CombinedOutput()
	}()
	cout, cerr := p.B.Command(bin, append(client, "--connect-wait=20s", p.A.Addr4().String())...).CombinedOutput()
	wg.Wait()
	require.True(t, serr == nil && cerr == nil, "%s: server %v:\n%s\nclient %v:\n%s", name, serr, sout, cerr, cout)
	return string(sout), string(cout)
}

// TestSoftnicToSoftnicOverVeth runs softnic pingpong and softnic perf
// between two namespaces over AF_XDP, with IPv4 and with IPv6 GIDs.
func TestSoftnicToSoftnicOverVeth(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	run := func(name string, server, client []string) (string, string) {
		t.Helper()
		return runVethPair(t, p, bin, name, server, client)
	}
	// Without -g/-x both tools pick the first IPv4 GID (index 1 here).
	sout, cout := run("defaults", []string{"pingpong", "-d", p.A.Ifname, "-n", "10"}, []string{"pingpong", "-d", p.B.Ifname, "-n", "10"})
	assert.Contains(t, sout, "GID ::ffff:"+p.A.Addr4().String(), "server's default GID")
	assert.Contains(t, cout, "GID ::ffff:"+p.B.Addr4().String(), "client's default GID")
	// How the sockets bound, as the kernel gave it (a veth: copy mode).
	assert.Contains(t, sout, "softnic: "+p.A.Ifname+": AF_XDP bind copy", "server's bind line")
	assert.Contains(t, cout, "softnic: "+p.B.Ifname+": AF_XDP bind copy", "client's bind line")
	sout, cout = run("write_bw -R", []string{"perf", "write_bw", "-R", "-d", p.A.Ifname, "-n", "200"},
		[]string{"perf", "write_bw", "-R", "-d", p.B.Ifname, "-n", "200"})
	assert.Regexp(t, `(?m)^ 65536      200 `, cout, "write_bw -R client")
	assert.Contains(t, sout, "softnic: "+p.A.Ifname+": AF_XDP bind copy", "perf -R server's bind line")
	assert.Contains(t, cout, "softnic: "+p.B.Ifname+": AF_XDP bind copy", "perf -R client's bind line")
	for _, fam := range []struct {
		name   string
		ia, ib string
		gid    string
	}{
		{"IPv4", indexOf(ga, p.A.Addr4()), indexOf(gb, p.B.Addr4()), "00:00:00:00:00:00:00:00:00:00:255:255:10:"},
		{"IPv6", indexOf(ga, p.A.Addr6()), indexOf(gb, p.B.Addr6()), "253:71:00:00:"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			sout, cout := run("pingpong", []string{"pingpong", "-d", p.A.Ifname, "-g", fam.ia, "-n", "300"},
				[]string{"pingpong", "-d", p.B.Ifname, "-g", fam.ib, "-n", "300"})
			for _, out := range []string{sout, cout} {
				assert.Contains(t, out, "2457600 bytes in ", "pingpong output")
			}
			sout, cout = run("write_bw", []string{"perf", "write_bw", "-d", p.A.Ifname, "-x", fam.ia, "-n", "500"},
				[]string{"perf", "write_bw", "-d", p.B.Ifname, "-x", fam.ib, "-n", "500"})
			line := regexp.MustCompile(`(?m)^ 65536      500 .*$`)
			l := line.FindString(cout)
			assert.NotEmpty(t, l, "write_bw client:\n%s", cout)
			assert.Equal(t, l, line.FindString(sout), "write_bw: the client's line against the server's:\n%s", sout)
			assert.Contains(t, cout, " GID: "+fam.gid, "write_bw client")
		})
	}
}

// TestUDPingpongOverVeth runs softnic pingpong --ud (ibv_ud_pingpong)
// between two namespaces over AF_XDP, with IPv4 and IPv6 GIDs, messages of
// the active MTU and -c.
func TestUDPingpongOverVeth(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	for _, fam := range []struct {
		name   string
		ia, ib string
	}{
		{"IPv4", indexOf(ga, p.A.Addr4()), indexOf(gb, p.B.Addr4())},
		{"IPv6", indexOf(ga, p.A.Addr6()), indexOf(gb, p.B.Addr6())},
	} {
		t.Run(fam.name, func(t *testing.T) {
			sout, cout := runVethPair(t, p, bin, "ud pingpong",
				[]string{"pingpong", "--ud", "-c", "-d", p.A.Ifname, "-g", fam.ia, "-n", "300", "-r", "16"},
				[]string{"pingpong", "--ud", "-c", "-d", p.B.Ifname, "-g", fam.ib, "-n", "300", "-r", "16"})
			for _, out := range []string{sout, cout} {
				assert.Contains(t, out, "614400 bytes in ", "ud pingpong output")
				assert.NotContains(t, out, "invalid data")
			}
		})
	}
}

// TestUCPingpongOverVeth runs softnic pingpong --uc (ibv_uc_pingpong)
// between two namespaces over AF_XDP, with messages of several packets
// and -c.
func TestUCPingpongOverVeth(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	args := []string{"pingpong", "--uc", "-c", "-m", "1024", "-s", "8192", "-n", "300", "-r", "16"}
	sout, cout := runVethPair(t, p, bin, "uc pingpong",
		append(args, "-d", p.A.Ifname, "-g", indexOf(ga, p.A.Addr4())),
		append(args, "-d", p.B.Ifname, "-g", indexOf(gb, p.B.Addr4())))
	for _, out := range []string{sout, cout} {
		assert.Contains(t, out, "4915200 bytes in ", "uc pingpong output")
		assert.NotContains(t, out, "invalid data")
	}
}
