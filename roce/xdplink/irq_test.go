package xdplink

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeIRQ is one interrupt vector of the fake tree: its handler's name and
// the CPU it is on.
type fakeIRQ struct {
	irq  int
	name string
	cpu  int
}

// fakeIRQTree lays out, under a temporary directory, what /sys/class/net
// and /proc/irq show of a virtio-net interface eth0 (the vectors on the PCI
// function above the virtio device) and of a veth without vectors, and
// points sysNet and procIRQ at it.
func fakeIRQTree(t *testing.T, irqs []fakeIRQ) {
	root := t.TempDir()
	pci := filepath.Join(root, "sys/devices/pci0000:00/0000:00:03.0")
	virtio := filepath.Join(pci, "virtio1")
	require.NoError(t, os.MkdirAll(virtio, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(pci, "msi_irqs"), 0o755))
	net := filepath.Join(root, "sys/class/net")
	require.NoError(t, os.MkdirAll(filepath.Join(net, "eth0"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(net, "veth0"), 0o755))
	require.NoError(t, os.Symlink(virtio, filepath.Join(net, "eth0", "device")))
	for _, v := range irqs {
		n := strconv.Itoa(v.irq)
		require.NoError(t, os.WriteFile(filepath.Join(pci, "msi_irqs", n), []byte("msix\n"), 0o644))
		dir := filepath.Join(root, "proc/irq", n)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, v.name), 0o755))
		cpu := []byte(strconv.Itoa(v.cpu) + "\n")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "effective_affinity_list"), cpu, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "smp_affinity_list"), []byte("0-1\n"), 0o644))
	}
	oldNet, oldIRQ := sysNet, procIRQ
	sysNet, procIRQ = net, filepath.Join(root, "proc/irq")
	t.Cleanup(func() { sysNet, procIRQ = oldNet, oldIRQ })
}

func affinityOf(t *testing.T, irq int) string {
	b, err := os.ReadFile(irqFile(irq, "smp_affinity_list"))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// virtio-net with two queue pairs in a two-vCPU guest: each receive vector
// on another CPU than its transmit vector.
var virtioIRQs = []fakeIRQ{
	{24, "virtio1-config", 0},
	{25, "virtio1-input.0", 1},
	{26, "virtio1-output.0", 0},
	{27, "virtio1-input.1", 0},
	{28, "virtio1-output.1", 1},
}

func TestQueueVectors(t *testing.T) {
	fakeIRQTree(t, virtioIRQs)
	assert.Equal(t, []int{25, 26}, queueVectors("eth0")[0], "receive vector first, no config vector")
	assert.Equal(t, []int{27, 28}, queueVectors("eth0")[1])
	assert.Empty(t, queueVectors("eth0")[2])
	assert.Empty(t, queueVectors("veth0")[0], "a device without MSI vectors")
	assert.Empty(t, queueVectors("nosuch")[0])
}

func TestAlignIRQsMovesTheQueuesVectorsAndRestores(t *testing.T) {
	fakeIRQTree(t, virtioIRQs)
	l := &Link{ifname: "eth0"}
	assert.Equal(t, 1, l.alignIRQs([]int{0}), "the receive vector's CPU")
	assert.Equal(t, "0-1", affinityOf(t, 25), "already there: left alone")
	assert.Equal(t, "1", affinityOf(t, 26), "the transmit vector joins it")
	assert.Equal(t, "0-1", affinityOf(t, 27), "another queue's vectors stay")

	// The second engine's queue: its receive vector is on CPU 0, which no
	// engine took.
	assert.Equal(t, 0, l.alignIRQs([]int{1}))
	assert.Equal(t, "0", affinityOf(t, 28))

	require.NoError(t, l.Close())
	for _, irq := range []int{25, 26, 27, 28} {
		assert.Equal(t, "0-1", affinityOf(t, irq), "vector %d restored", irq)
	}
	assert.Equal(t, -1, l.alignIRQs([]int{0}), "nothing moves after Close")
	assert.Equal(t, "0-1", affinityOf(t, 26))
}

func TestAlignIRQsSpreadsEnginesOverCPUs(t *testing.T) {
	var allowed unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &allowed))
	if allowed.Count() < 2 || !allowed.IsSet(0) || !allowed.IsSet(1) {
		t.Skip("missing: CPUs 0 and 1 in this process's affinity mask (the second engine is spread to CPU 0)")
	}
	// Both receive vectors on CPU 1.
	fakeIRQTree(t, []fakeIRQ{
		{25, "eth0-TxRx-0", 1},
		{26, "eth0-TxRx-1", 1},
	})
	l := &Link{ifname: "eth0"}
	assert.Equal(t, 1, l.alignIRQs([]int{0}))
	assert.Equal(t, 0, l.alignIRQs([]int{1}), "the second engine takes a CPU no engine has")
	assert.Equal(t, "0", affinityOf(t, 26))
}

func TestKeepIRQsMovesNothing(t *testing.T) {
	fakeIRQTree(t, virtioIRQs)
	l := &Link{ifname: "eth0", keepIRQs: true}
	assert.Equal(t, 1, l.alignIRQs([]int{0}), "still tells where the receive vector is")
	assert.Equal(t, "0-1", affinityOf(t, 26))
	assert.Equal(t, -1, (&Link{ifname: "veth0"}).alignIRQs([]int{0}))
}

func TestQueueOfIRQ(t *testing.T) {
	for _, c := range []struct {
		name string
		q    int
		ok   bool
	}{
		{"virtio1-input.0", 0, true},
		{"virtio1-output.12", 12, true},
		{"eth0-TxRx-3", 3, true},
		{"ens5-rx-1", 1, true},
		{"mlx5_comp7@pci:0000:08:00.0", 7, true},
		{"virtio1-config", 0, false},
		{"mlx5_async0@pci:0000:08:00.0", 0, false},
		{"1234", 0, false},
		{"", 0, false},
		{"q1234567", 0, false},
		{"@pci", 0, false},
	} {
		q, ok := queueOfIRQ(c.name)
		assert.Equal(t, c.ok, ok, c.name)
		if c.ok {
			assert.Equal(t, c.q, q, c.name)
		}
	}
}

func TestFirstCPU(t *testing.T) {
	for in, want := range map[string]int{"1\n": 1, "0-3\n": 0, "2,5": 2, "12-15,17": 12} {
		got, ok := firstCPU([]byte(in))
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "\n", "x", "-1", ",3"} {
		_, ok := firstCPU([]byte(in))
		assert.False(t, ok, in)
	}
}

func FuzzQueueOfIRQ(f *testing.F) {
	f.Add("virtio1-input.0")
	f.Add("mlx5_comp7@pci:0000:08:00.0")
	f.Fuzz(func(t *testing.T, name string) {
		q, ok := queueOfIRQ(name)
		if ok && (q < 0 || !strings.Contains(name, strconv.Itoa(q))) {
			t.Fatalf("%q: queue %d", name, q)
		}
	})
}

// A process killed after moving vectors leaves the IRQ state file; the
// next Open with it (restoreIRQState) gives the vectors back.
func TestIRQStateSurvivesAKill(t *testing.T) {
	fakeIRQTree(t, virtioIRQs)
	state := filepath.Join(t.TempDir(), "softnic_eth0.irqs")
	l := &Link{ifname: "eth0", irqState: state}
	l.alignIRQs([]int{0})
	l.alignIRQs([]int{1})
	require.Equal(t, "1", affinityOf(t, 26))
	require.Equal(t, "0", affinityOf(t, 28))
	data, err := os.ReadFile(state)
	require.NoError(t, err)
	require.Equal(t, "26 0-1\n28 0-1\n", string(data))

	// The process dies here: no Close. The next start restores.
	require.NoError(t, restoreIRQState(state))
	for _, irq := range []int{25, 26, 27, 28} {
		assert.Equal(t, "0-1", affinityOf(t, irq), "vector %d restored", irq)
	}
	_, err = os.Stat(state)
	require.True(t, os.IsNotExist(err), "the file is gone once restored")
	require.NoError(t, restoreIRQState(state), "no file: nothing to do")

	// A clean Close removes the file too.
	l = &Link{ifname: "eth0", irqState: state}
	l.alignIRQs([]int{0})
	require.FileExists(t, state)
	require.NoError(t, l.Close())
	require.NoFileExists(t, state)
	require.Equal(t, "0-1", affinityOf(t, 26))

	require.NoError(t, os.WriteFile(state, []byte("26 0-1; rm -rf /\n"), 0o644))
	require.Error(t, restoreIRQState(state), "a line that is no CPU list")
}

func FuzzParseIRQState(f *testing.F) {
	f.Add([]byte("26 0-1\n28 3,5-7\n"))
	f.Add([]byte("x y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		moved, err := parseIRQState(data)
		if err != nil {
			return
		}
		for _, m := range moved {
			if m.irq < 0 || strings.Trim(m.prev, "0123456789,-") != "" {
				t.Fatalf("parsed %+v", m)
			}
		}
	})
}

// A link at the state file's name or at its temporary file's is a stale
// entry: unlinked, its target neither read nor written.
func TestIRQStateFollowsNoLink(t *testing.T) {
	fakeIRQTree(t, virtioIRQs)
	dir := t.TempDir()
	state := filepath.Join(dir, "softnic_eth0.irqs")
	target := filepath.Join(dir, "target")
	require.NoError(t, os.WriteFile(target, []byte("25 1\n"), 0o644))
	require.NoError(t, os.Symlink(target, state))
	require.NoError(t, restoreIRQState(state))
	assert.Equal(t, "0-1", affinityOf(t, 25), "the link's target was read as a state file")
	_, err := os.Lstat(state)
	assert.True(t, os.IsNotExist(err), "the link is left")

	require.NoError(t, os.Symlink(target, state+".tmp"))
	l := &Link{ifname: "eth0", irqState: state}
	l.alignIRQs([]int{0})
	data, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "25 1\n", string(data), "written through the link")
	data, err = os.ReadFile(state)
	require.NoError(t, err)
	assert.Equal(t, "26 0-1\n", string(data))
	require.NoError(t, l.Close())
}
