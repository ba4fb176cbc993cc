package xdplink

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A queue's interrupts and the engine that serves the queue belong on one
// CPU, as a NIC driver spreads its queue pairs' vectors one CPU each. In a
// copy-mode AF_XDP socket the receive interrupt's softirq runs the XDP
// program and copies the frame; the transmit interrupt frees what was
// sent. virtio-net places a queue pair's receive and transmit vectors on
// different CPUs: in a two-vCPU guest softnic's write_lat then kept both
// vCPUs busy (one polling, one taking the other vector's interrupts) and
// on a host of two cores shared by four vCPUs each interrupt waited for a
// core; with both vectors and the polling thread on one vCPU, the round
// trip fell from 2.0 ms to 0.33-0.42 ms.

// procIRQ and sysNet are where the kernel shows interrupts and network
// interfaces; tests point them at a copy.
var (
	procIRQ = "/proc/irq"
	sysNet  = "/sys/class/net"
)

// irqAffinity is an interrupt vector moved to a queue's CPU, with the CPU
// list it had before (smp_affinity_list), to be restored.
type irqAffinity struct {
	irq  int
	prev string
}

// queueVectors returns the MSI vectors of the interface's device by the
// queue they serve (their names end in the queue's number:
// virtio1-input.0, eth0-TxRx-0, mlx5_comp0@pci...), each queue's receive
// vector first. Devices without MSI vectors (veth, loopback) have none.
func queueVectors(ifname string) map[int][]int {
	dev, err := filepath.EvalSymlinks(filepath.Join(sysNet, ifname, "device"))
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir(filepath.Join(dev, "msi_irqs"))
	if err != nil {
		// virtio-net's device is the virtio one; the PCI function
		// above it has the vectors.
		if ents, err = os.ReadDir(filepath.Join(filepath.Dir(dev), "msi_irqs")); err != nil {
			return nil
		}
	}
	rx, other := map[int][]int{}, map[int][]int{}
	for _, e := range ents {
		irq, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name := irqName(irq)
		q, ok := queueOfIRQ(name)
		if !ok {
			continue
		}
		if strings.Contains(name, "input") || strings.Contains(strings.ToLower(name), "rx") {
			rx[q] = append(rx[q], irq)
		} else {
			other[q] = append(other[q], irq)
		}
	}
	for q, irqs := range other {
		rx[q] = append(rx[q], irqs...)
	}
	return rx
}

// vectorsOf returns the vectors of the queues, the first queue's receive
// vector first, and the CPU that vector is on now (-1 when the queues have
// no vectors or it is unknown).
func vectorsOf(ifname string, queues []int) ([]int, int) {
	byQueue := queueVectors(ifname)
	var irqs []int
	for _, q := range queues {
		irqs = append(irqs, byQueue[q]...)
	}
	if len(irqs) == 0 {
		return nil, -1
	}
	cpu, ok := irqCPU(irqs[0])
	if !ok {
		return irqs, -1
	}
	return irqs, cpu
}

// irqFile is the path of file under /proc/irq/N.
func irqFile(irq int, file string) string {
	return filepath.Join(procIRQ, strconv.Itoa(irq), file)
}

// irqName returns the name of the interrupt's handler: /proc/irq/N holds a
// directory of that name.
func irqName(irq int) string {
	ents, err := os.ReadDir(irqFile(irq, ""))
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if e.IsDir() {
			return e.Name()
		}
	}
	return ""
}

// queueOfIRQ reads the queue number that ends an interrupt's name, before
// any "@bus" suffix. Configuration and asynchronous-event vectors serve no
// queue.
func queueOfIRQ(name string) (int, bool) {
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	if name == "" || strings.Contains(name, "config") || strings.Contains(name, "async") {
		return 0, false
	}
	end := len(name)
	start := end
	for start > 0 && name[start-1] >= '0' && name[start-1] <= '9' {
		start--
	}
	if start == end || start == 0 || end-start > 6 {
		return 0, false
	}
	n, err := strconv.Atoi(name[start:end])
	return n, err == nil
}

// irqCPU returns the CPU that takes the interrupt now: the first of its
// effective affinity, or of its requested one.
func irqCPU(irq int) (int, bool) {
	for _, f := range []string{"effective_affinity_list", "smp_affinity_list"} {
		b, err := os.ReadFile(irqFile(irq, f))
		if err != nil {
			continue
		}
		if cpu, ok := firstCPU(b); ok {
			return cpu, true
		}
	}
	return 0, false
}

// firstCPU reads the first CPU of a CPU list such as "1", "0-3" or "2,5".
func firstCPU(b []byte) (int, bool) {
	b = bytes.TrimSpace(b)
	if i := bytes.IndexAny(b, "-,"); i >= 0 {
		b = b[:i]
	}
	n, err := strconv.Atoi(string(b))
	return n, err == nil && n >= 0
}

// alignIRQs moves the vectors of the queues to the CPU of the first
// queue's receive vector, or if another engine's queues took that CPU, to
// the first CPU this process may use that none took, and returns that CPU
// (-1 when the queues have no vectors or it is unknown) and what to
// restore. A vector the kernel refuses to move (managed affinity, no
// privilege) stays where it is.
func alignIRQs(ifname string, queues []int, taken *unix.CPUSet) (int, []irqAffinity) {
	irqs, cpu := vectorsOf(ifname, queues)
	if cpu < 0 {
		return -1, nil
	}
	if taken.IsSet(cpu) {
		cpu = freeCPU(taken, cpu)
	}
	taken.Set(cpu)
	var moved []irqAffinity
	for _, irq := range irqs {
		if c, ok := irqCPU(irq); ok && c == cpu {
			continue
		}
		f := irqFile(irq, "smp_affinity_list")
		prev, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if os.WriteFile(f, []byte(strconv.Itoa(cpu)), 0) == nil {
			moved = append(moved, irqAffinity{irq: irq, prev: string(bytes.TrimSpace(prev))})
		}
	}
	return cpu, moved
}

// freeCPU returns the first CPU the process may run on that is not taken,
// or cpu when there is none.
func freeCPU(taken *unix.CPUSet, cpu int) int {
	var allowed unix.CPUSet
	if unix.SchedGetaffinity(0, &allowed) != nil {
		return cpu
	}
	for c := range 1024 {
		if allowed.IsSet(c) && !taken.IsSet(c) {
			return c
		}
	}
	return cpu
}

// restoreIRQs gives moved vectors back the affinity they had.
func restoreIRQs(moved []irqAffinity) {
	for _, m := range moved {
		os.WriteFile(irqFile(m.irq, "smp_affinity_list"), []byte(m.prev), 0)
	}
}

// alignIRQs aligns the vectors of the queues (unless KeepIRQs) and returns
// their CPU; Close restores what it moved.
func (l *Link) alignIRQs(queues []int) int {
	l.irqMu.Lock()
	defer l.irqMu.Unlock()
	if l.irqsClosed {
		return -1
	}
	if l.keepIRQs {
		_, cpu := vectorsOf(l.ifname, queues)
		return cpu
	}
	cpu, moved := alignIRQs(l.ifname, queues, &l.irqCPUs)
	l.irqsMoved = append(l.irqsMoved, moved...)
	if l.irqState != "" && len(moved) > 0 {
		// Best effort: without the file a killed process leaves them moved.
		saveIRQState(l.irqState, l.irqsMoved)
	}
	return cpu
}
