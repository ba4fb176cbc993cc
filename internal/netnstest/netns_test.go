package netnstest

import (
	"bytes"
	"errors"
	"golang.org/x/sys/unix"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPairConnectivityAndCleanup(t *testing.T) {
	Integration(t)
	p, err := New(Config{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{p.A.Namespace, p.B.Namespace}
	t.Cleanup(func() { p.Close() })

	l, err := p.A.Link()
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().MTU != 9000 {
		t.Errorf("MTU = %d, want 9000", l.Attrs().MTU)
	}
	for _, dst := range []netip.Addr{p.B.Addr4(), p.B.Addr6()} {
		if err := p.A.Ping(dst, 2*time.Second); err != nil {
			t.Errorf("ping: %v", err)
		}
	}
	if err := TCPEcho(&p.B, &p.A, p.B.Addr4(), bytes.Repeat([]byte("x"), 100000), 5*time.Second); err != nil {
		t.Errorf("tcp: %v", err)
	}
	// A namespace that does not hold the address cannot ping it from itself
	// over a different subnet: a negative check that Ping can fail.
	if err := p.A.Ping(netip.MustParseAddr("10.48.0.9"), 200*time.Millisecond); err == nil {
		t.Error("ping to an unreachable address succeeded")
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join("/var/run/netns", n)); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after Close (stat: %v)", n, err)
		}
	}
}

func TestNewFailureCleansUp(t *testing.T) {
	Integration(t)
	// An invalid MTU makes the veth creation fail after both namespaces exist.
	p, err := New(Config{MTU: 1 << 20})
	if err == nil {
		p.Close()
		t.Fatal("New with MTU 1 MiB succeeded")
	}
	entries, _ := os.ReadDir("/var/run/netns")
	prefix := namePrefix + itoa(os.Getpid()) + "-"
	for _, e := range entries {
		if len(e.Name()) > len(prefix) && e.Name()[:len(prefix)] == prefix {
			t.Errorf("namespace %s left behind after failed New: %v", e.Name(), err)
		}
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
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	t.Cleanup(func() { os.Remove(filepath.Join("/var/run/netns", stale)) })
	NewT(t, Config{})
	if _, err := os.Stat(filepath.Join("/var/run/netns", stale)); !os.IsNotExist(err) {
		t.Errorf("stale namespace %s survived New (stat: %v)", stale, err)
	}
}

func TestWithoutCapabilities(t *testing.T) {
	Integration(t)
	err := WithoutCapabilities([]int{unix.CAP_NET_RAW}, func() error {
		_, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		return err
	})
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("raw socket without CAP_NET_RAW: %v, want EPERM", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatalf("capabilities not restored: %v", err)
	}
	unix.Close(fd)
}
