package system

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/internal/netnstest"
)

// TestRDMACMAddressing runs testdata/cm_addr.c through softnic's
// librdmacm and a daemon, as user nobody: rdma_getaddrinfo with the
// addresses in the hints, loopback and wildcard binds and connections to
// 127.0.0.1, 0.0.0.0 and the device's own address, id->pd from the first
// moment an ID has the device, and address resolution's errors (no route,
// no host within the timeout); once every ID is gone the daemon counts no
// PD of the program's left. Then Debian's rping to an address with no
// host fails within its timeout with the kernel's ADDR_ERROR, and
// fi_info lists verbs;ofi_rxm (libfabric binds 127.0.0.1 to find it).
func TestRDMACMAddressing(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install rdmacm-utils", "rping")
	w := newProviderWorld(t)
	t.Run("cm_addr", w.testCMAddr)
	t.Run("rping to no host", w.testRpingNoHost)
	t.Run("fi_info verbs;ofi_rxm", w.testFiInfoRxm)
	t.Run("listeners in their namespaces", w.testListenerNamespace)
}

// noHost is an address of end's IPv4 subnet that no host has.
func noHost(end *netnstest.End) netip.Addr {
	a := end.Addr4().As4()
	a[3] = 200
	return netip.AddrFrom4(a)
}

// noRoute is an address (TEST-NET-2) the test namespaces have no route to.
const noRoute = "198.51.100.1"

func (w *providerWorld) testCMAddr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := filepath.Join(systest.RootDir(t), "cm_addr")
	out, err := exec.CommandContext(ctx, "cc", "-Wall", "-Wextra", "-Werror", "-o", bin, filepath.Join("testdata", "cm_addr.c"),
		"-lrdmacm", "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	cmd := w.command(ctx, w.a, bin, w.a.Addr4().String(), noHost(w.a).String(), noRoute)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "released" {
		lines = append(lines, sc.Text())
	}
	printed := strings.Join(lines, "\n")
	require.NotContains(t, printed, "FAIL", "%s", printed)
	// Every ID is gone: so is the PD they shared.
	res := w.sessionOf(t, w.a, "cm_addr")
	assert.Zero(t, res.Counts.PD, "PDs left after the last ID went:\n%s", printed)
	assert.Zero(t, res.Counts.CMID)
	assert.Zero(t, res.Counts.QP)
	io.WriteString(stdin, "\n")
	rest, _ := io.ReadAll(stdout)
	require.NoError(t, cmd.Wait(), "%s\n%s", printed, rest)
	printed += "\n" + string(rest)
	t.Logf("%s", printed)
	assert.Contains(t, printed, "all checks passed")
	assert.Len(t, regexp.MustCompile(`(?m)^ok `).FindAllString(printed, -1), 28, "checks that ran:\n%s", printed)
}

// sessionOf returns the resources of the session of the program named
// comm on end's daemon.
func (w *providerWorld) sessionOf(t *testing.T, end *netnstest.End, comm string) hostif.SessionResources {
	t.Helper()
	m, err := session.DialMonitor(filepath.Join(w.runDir, "softnic_"+end.Ifname+".sock"))
	require.NoError(t, err)
	defer m.Close()
	res, err := m.Resources()
	require.NoError(t, err)
	for _, s := range res.Session {
		if strings.TrimRight(string(s.Comm[:]), "\x00") == comm {
			return s
		}
	}
	require.Failf(t, "no session", "no session of %s on %s", comm, end.Ifname)
	return hostif.SessionResources{}
}

// testRpingNoHost: rping to an address of the subnet that nobody has
// fails with the kernel's ADDR_ERROR (ETIMEDOUT) after its 2-second
// address resolution, rather than wait for the REQ's retries.
func (w *providerWorld) testRpingNoHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	out, err := w.command(ctx, w.b, "rping", "-c", "-a", noHost(w.b).String(), "-C", "1").CombinedOutput()
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "rping did not end:\n%s", out)
	require.Error(t, err, "rping to nobody succeeded:\n%s", out)
	assert.Contains(t, string(out), "cma event RDMA_CM_EVENT_ADDR_ERROR, error -110", "%s", out)
	t.Logf("rping to %v ended after %v: %v\n%s", noHost(w.b), took, err, out)
}

// testFiInfoRxm: libfabric's verbs provider finds its devices by binding
// their addresses, and verbs;ofi_rxm by binding 127.0.0.1 (fi_getinfo
// with no node asks for "localhost"), which the kernel's rdma_cm takes as
// a wildcard.
func (w *providerWorld) testFiInfoRxm(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install libfabric-bin", "fi_info")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := w.command(ctx, w.a, "fi_info", "-p", "verbs;ofi_rxm").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "provider: verbs;ofi_rxm", "%s", out)
	assert.Contains(t, string(out), "softnic_"+w.a.Ifname, "%s", out)
}

// testListenerNamespace: programs that see both devices (softnic exec
// without -d), one in each namespace, listen each on the device whose
// interface is in its namespace, as the kernel's rdma_cm takes only the
// devices of the caller's namespace (whichever device libibverbs lists
// first).
func (w *providerWorld) testListenerNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var socks []string
	var befores []listenerCount
	var outs []fmt.Stringer
	for _, end := range []*netnstest.End{w.a, w.b} {
		sock := filepath.Join(w.runDir, "softnic_"+end.Ifname+".sock")
		before, err := listeners(sock, 0)
		require.NoError(t, err)
		socks, befores = append(socks, sock), append(befores, before)
	}
	for i, end := range []*netnstest.End{w.a, w.b} {
		srv := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", end.Namespace},
			systest.AsUser(systest.Nobody, w.bin, "exec", "--run-dir", w.runDir, "--", "rping", "-s")...)...)
		srv.WaitDelay = 5 * time.Second
		out, exited := startWatched(t, srv)
		outs = append(outs, out)
		defer func() {
			srv.Process.Kill()
			<-exited
		}()
		require.NoError(t, awaitListener(ctx, socks[i], befores[i].last, exited), "rping -s in %s's namespace:\n%s", end.Ifname, out.String())
	}
	for i, end := range []*netnstest.End{w.a, w.b} {
		l, err := listeners(socks[i], befores[i].last)
		require.NoError(t, err)
		assert.Equal(t, 1, l.listening, "listeners on %s's device:\n%s\n%s", end.Ifname, outs[0], outs[1])
	}
}
