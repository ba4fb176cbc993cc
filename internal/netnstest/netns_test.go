package netnstest

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestPairConnectivityAndCleanup(t *testing.T) {
	Integration(t)
	p, err := New(Config{MTU: 9000})
	require.NoError(t, err)
	names := []string{p.A.Namespace, p.B.Namespace}
	t.Cleanup(func() { p.Close() })

	l, err := p.A.Link()
	require.NoError(t, err)
	assert.Equal(t, 9000, l.Attrs().MTU, "MTU")
	for _, dst := range []netip.Addr{p.B.Addr4(), p.B.Addr6()} {
		assert.NoError(t, p.A.Ping(dst, 2*time.Second), "ping")
	}
	assert.NoError(t, TCPEcho(&p.B, &p.A, p.B.Addr4(), bytes.Repeat([]byte("x"), 100000), 5*time.Second), "tcp")
	// A namespace that does not hold the address cannot ping it from itself
	// over a different subnet: a negative check that Ping can fail.
	assert.Error(t, p.A.Ping(netip.MustParseAddr("10.48.0.9"), 200*time.Millisecond), "ping to an unreachable address succeeded")

	require.NoError(t, p.Close())
	for _, n := range names {
		_, err := os.Stat(filepath.Join("/var/run/netns", n))
		assert.True(t, os.IsNotExist(err), "namespace %s still exists after Close (stat: %v)", n, err)
	}
}

func TestNewFailureCleansUp(t *testing.T) {
	Integration(t)
	// An invalid MTU makes the veth creation fail after both namespaces exist.
	p, err := New(Config{MTU: 1 << 20})
	if err == nil {
		p.Close()
	}
	require.Error(t, err, "New with MTU 1 MiB succeeded")
	entries, _ := os.ReadDir("/var/run/netns")
	prefix := namePrefix + itoa(os.Getpid()) + "-"
	for _, e := range entries {
		assert.False(t, len(e.Name()) > len(prefix) && e.Name()[:len(prefix)] == prefix,
			"namespace %s left behind after failed New: %v", e.Name(), err)
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

func TestNewSweepsNamespacesOfDeadProcesses(t *testing.T) {
	Integration(t)
	// PID 2^22+1 is above the kernel's pid_max limit, so it never runs.
	stale := namePrefix + "4194305-1a"
	h, err := newNamed(stale)
	require.NoError(t, err)
	h.Close()
	t.Cleanup(func() { os.Remove(filepath.Join("/var/run/netns", stale)) })
	NewT(t, Config{})
	_, err = os.Stat(filepath.Join("/var/run/netns", stale))
	assert.True(t, os.IsNotExist(err), "stale namespace %s survived New (stat: %v)", stale, err)
}

func TestWithoutCapabilities(t *testing.T) {
	Integration(t)
	err := WithoutCapabilities([]int{unix.CAP_NET_RAW}, func() error {
		_, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		return err
	})
	require.ErrorIs(t, err, unix.EPERM, "raw socket without CAP_NET_RAW")
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	require.NoError(t, err, "capabilities not restored")
	unix.Close(fd)
}

// recordTB records how Need ends a test instead of ending it.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                           {}
func (r *recordTB) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }
func (r *recordTB) Skip(args ...any)                  { r.skip = fmt.Sprint(args...) }

func TestNeedFailsUnderCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recordTB{TB: t}
	Need(r, "needs qemu")
	assert.Contains(t, r.fatal, "needs qemu")
	assert.Empty(t, r.skip)

	t.Setenv("CI", "")
	r = &recordTB{TB: t}
	RequireCommands(r, "install-deps.sh", "sh", "softnic-no-such-command")
	assert.Equal(t, "needs softnic-no-such-command: run install-deps.sh", r.skip)
	assert.Empty(t, r.fatal)
}

// A bridged pair passes traffic through its middle namespace, which
// Close deletes with the ends.
func TestBridgedPair(t *testing.T) {
	Integration(t)
	p, err := New(Config{Bridged: true})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	require.NotEmpty(t, p.Middle)
	for _, dst := range []netip.Addr{p.B.Addr4(), p.B.Addr6()} {
		assert.NoError(t, p.A.Ping(dst, 5*time.Second), "ping through the bridge")
	}
	out, err := exec.Command("ip", "-n", p.Middle, "-o", "link", "show", "master", "br0").Output()
	require.NoError(t, err, string(out))
	assert.Equal(t, 2, strings.Count(string(out), " master br0 "), "two bridge ports:\n%s", out)
	require.NoError(t, p.Close())
	for _, n := range []string{p.A.Namespace, p.B.Namespace, p.Middle} {
		_, err := os.Stat(filepath.Join("/var/run/netns", n))
		assert.True(t, os.IsNotExist(err), "namespace %s left", n)
	}
}
