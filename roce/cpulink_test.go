package roce_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/memlink"
)

// cpuLink is a memlink endpoint whose interrupts arrive on a given CPU.
type cpuLink struct {
	*memlink.Endpoint
	cpu int
}

func (l cpuLink) CPU() int { return l.cpu }

// threadsOnlyOn counts the process's threads allowed on cpu alone.
func threadsOnlyOn(t *testing.T, cpu int) int {
	paths, err := filepath.Glob("/proc/self/task/*/status")
	require.NoError(t, err)
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == strconv.Itoa(cpu) {
				n++
			}
		}
	}
	return n
}

// An engine whose link names the CPU of its interrupts runs on that CPU,
// and gives its thread back when the device closes.
func TestEngineRunsOnItsLinksCPU(t *testing.T) {
	var allowed unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &allowed))
	if allowed.Count() < 2 || !allowed.IsSet(1) {
		t.Skip("missing: CPU 1 and a second CPU in this process's affinity mask (the engine is pinned to CPU 1)")
	}
	before := threadsOnlyOn(t, 1)
	la, lb := memlink.Pair(memlink.Config{})
	t.Cleanup(func() { la.Close(); lb.Close() })
	d, err := roce.NewDevice(cpuLink{la, 1}, roce.DeviceConfig{Addrs: []netip.Addr{netip.MustParseAddr("10.4.0.1")}})
	require.NoError(t, err)
	require.Equal(t, 1, d.EngineCPU(0))
	require.Equal(t, -1, d.EngineCPU(1), "no such engine")
	require.Eventually(t, func() bool { return threadsOnlyOn(t, 1) == before+1 }, 5*time.Second, 10*time.Millisecond,
		"the engine goroutine's thread is kept on CPU 1")
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool { return threadsOnlyOn(t, 1) == before }, 5*time.Second, 10*time.Millisecond,
		"the thread may run anywhere again")

	plain, err := roce.NewDevice(lb, roce.DeviceConfig{Addrs: []netip.Addr{netip.MustParseAddr("10.4.0.2")}})
	require.NoError(t, err)
	defer plain.Close()
	require.Equal(t, -1, plain.EngineCPU(0), "a link without interrupts")
}

// A device given EngineCPUs keeps its engine there, in place of its
// link's interrupt CPU, and gives the thread back when it closes.
func TestEngineCPUsOverrideTheLinks(t *testing.T) {
	var allowed unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &allowed))
	if allowed.Count() < 2 || !allowed.IsSet(0) || !allowed.IsSet(1) {
		t.Skip("missing: CPUs 0 and 1 in this process's affinity mask (the engine is moved from one to the other)")
	}
	before := threadsOnlyOn(t, 0)
	la, lb := memlink.Pair(memlink.Config{})
	t.Cleanup(func() { la.Close(); lb.Close() })
	d, err := roce.NewDevice(cpuLink{la, 1}, roce.DeviceConfig{Addrs: []netip.Addr{netip.MustParseAddr("10.4.0.1")},
		EngineCPUs: []int{0}})
	require.NoError(t, err)
	require.Equal(t, 0, d.EngineCPU(0))
	require.Eventually(t, func() bool { return threadsOnlyOn(t, 0) == before+1 }, 5*time.Second, 10*time.Millisecond,
		"the engine goroutine's thread is kept on CPU 0")
	require.NoError(t, d.Close())
	require.Eventually(t, func() bool { return threadsOnlyOn(t, 0) == before }, 5*time.Second, 10*time.Millisecond,
		"the thread may run anywhere again")
}
