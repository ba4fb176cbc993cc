// Package cpupin keeps a polling goroutine's thread on one CPU while it
// polls, and lets it go when that CPU is contested.
//
// A thread that spins on a completion queue and runs softnic's engine
// between looks gains nothing from moving between CPUs, and in a virtual
// machine whose vCPUs outnumber the host's cores each move waits for the
// other vCPU's thread to be scheduled by the host. The Linux scheduler
// moves it because the process has other threads (the Go runtime's, the
// engine goroutine's) that wake beside it. In a two-vCPU qemu guest
// write_lat's typical round trip was 2.0-2.2 ms with the thread free,
// 0.8-1.7 ms with it kept on the CPU it ran on, and 0.33-0.42 ms with it
// kept on the CPU that takes the queue's interrupts, the other vCPU idle.
// Poll-mode drivers (DPDK's lcores) pin for
// the same reasons.
//
// Pinned where it happened to run, a thread can share a CPU with another
// poller, the other end of a test on one host for instance. A Pin watches
// its thread's run-queue delay (/proc/thread-self/schedstat) and gives the
// CPU set back once the thread waited for its CPU more than a third of the
// time, twice in a row.
//
//	pin := cpupin.StartOn(cpu) // the CPU of the queue's interrupts
//	defer pin.Stop()
//	for !done() {
//		pin.Check()
//		poll()
//	}
package cpupin

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Counts are this process's pins: how many StartOn made, how many of those
// Check gave up because their CPU was contested, and how many times a pin
// followed its target to another CPU.
type Counts struct {
	Pinned, Released, Moved atomic.Uint64
}

// Stats counts the process's pins, for diagnostics.
var Stats Counts

// Pin is a goroutine's hold on its thread's CPU. The zero value and nil are
// a Pin that pinned nothing.
type Pin struct {
	// cpu is the CPU the thread was kept on, -1 when it was not.
	cpu int
	// orig is the thread's CPU set before StartOn, restored by release.
	orig unix.CPUSet
	// stat is the thread's /proc schedstat, open while pinned.
	stat int
	// calls counts Check calls since the last look at stat; last is what
	// that look read.
	calls uint32
	last  schedStat
	// follow, if set, names the CPU to keep the thread on; Check moves the
	// thread when it changes.
	follow func() int
	// contested counts the windows in a row in which the thread waited
	// for its CPU more than a third of the time.
	contested int
	// released tells that the CPU set was given back before Stop because
	// the CPU was contested.
	released bool
	locked   bool
	// held pins are never given back for contention (StartHeld).
	held bool
}

// checkEvery is how many Check calls pass between two looks at the
// thread's schedstat: a read of a /proc file costs a few µs, a poll a
// fraction of that.
const checkEvery = 4096

// minWindow is the least run time plus delay, in ns, over which Check
// judges contention: shorter windows judge a single wake-up of another
// thread.
const minWindow = 5e6

// StartOn locks the calling goroutine to its thread and the thread to cpu,
// or to the CPU it runs on when cpu < 0 or is not one it may run on. When
// the thread may run on one CPU only, or pinning fails, it does neither.
// Stop undoes both.
func StartOn(cpu int) *Pin { return start(cpu, false) }

// StartHeld is StartOn for a CPU the thread was given to (an engine's
// --engine-cpus): Check never gives it back for contention, as the
// scheduler moves the other threads off instead. Without the CPU in the
// thread's set it pins nothing, and CPU returns -1.
func StartHeld(cpu int) *Pin { return start(cpu, true) }

func start(cpu int, held bool) *Pin {
	p := &Pin{cpu: -1, stat: -1}
	// Lock only to pin: a goroutine locked to its thread costs a hand-over
	// of its P to another thread and back at every Gosched or block (in a
	// one-vCPU guest that was half of write_lat's CPU time).
	if err := unix.SchedGetaffinity(0, &p.orig); err != nil {
		return p
	}
	if (held && !p.allows(cpu)) || (!held && p.orig.Count() < 2) {
		return p
	}
	runtime.LockOSThread()
	if !p.pin(cpu) {
		runtime.UnlockOSThread()
		return p
	}
	p.locked, p.held = true, held
	Stats.Pinned.Add(1)
	return p
}

// pin keeps the locked thread on cpu, or on the CPU it runs on when cpu is
// not one it may run on, and opens its schedstat.
func (p *Pin) pin(cpu int) bool {
	fd, err := unix.Open("/proc/thread-self/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	ok := true
	if !p.allows(cpu) {
		cpu, ok = currentCPU()
	}
	if !ok || !p.allows(cpu) || keepOn(cpu) != nil {
		unix.Close(fd)
		return false
	}
	p.cpu, p.stat = cpu, fd
	p.last, _ = readSchedStat(fd)
	return true
}

// allows reports whether the thread may run on cpu (it was in its set).
func (p *Pin) allows(cpu int) bool {
	return cpu >= 0 && cpu < 8*int(unsafe.Sizeof(p.orig)) && p.orig.IsSet(cpu)
}

// keepOn makes cpu the only one the calling thread may run on.
func keepOn(cpu int) error {
	var one unix.CPUSet
	one.Set(cpu)
	return unix.SchedSetaffinity(0, &one)
}

// CPU returns the CPU the thread is kept on, or -1 when it is not (never
// pinned, released, or stopped).
func (p *Pin) CPU() int {
	if p == nil {
		return -1
	}
	return p.cpu
}

// Released reports whether the pin was given up because its CPU was
// contested.
func (p *Pin) Released() bool { return p != nil && p.released }

// Check gives the thread its CPU set back when, in two windows of checks
// in a row, it waited on its CPU's run queue for more than a third of the
// time. Call it from the pinned goroutine on every poll; most calls only
// count.
func (p *Pin) Check() {
	if p == nil || p.cpu < 0 {
		return
	}
	if p.calls++; p.calls < checkEvery {
		return
	}
	p.calls = 0
	if p.follow != nil {
		p.move(p.follow())
	}
	if p.held {
		return
	}
	now, ok := readSchedStat(p.stat)
	if !ok {
		p.release()
		return
	}
	ran, waited := now.ran-p.last.ran, now.waited-p.last.waited
	if ran+waited < minWindow {
		return
	}
	p.last = now
	if waited*3 <= ran+waited {
		p.contested = 0
		return
	}
	// One window is not enough: starting threads (the runtime's, the
	// peer's exchange) contest the CPU for a while, and in a guest that
	// alone waited up to 27 % of a window. Two pollers on one CPU wait
	// half the time, window after window.
	if p.contested++; p.contested >= 2 {
		p.released = true
		Stats.Released.Add(1)
		p.release()
	}
}

// Follow makes Check keep the thread on the CPU target returns, as it
// changes (a QP moved to an engine on another CPU); target returns -1 when
// it knows none.
func (p *Pin) Follow(target func() int) {
	if p != nil {
		p.follow = target
	}
}

// move keeps the thread on cpu from now on, if it may run there.
func (p *Pin) move(cpu int) {
	if cpu != p.cpu && p.allows(cpu) && keepOn(cpu) == nil {
		p.cpu = cpu
		Stats.Moved.Add(1)
	}
}

// Stop gives the thread its CPU set back and unlocks the goroutine from it.
// Call it from the goroutine that called StartOn.
func (p *Pin) Stop() {
	if p == nil {
		return
	}
	p.release()
	if p.locked {
		p.locked = false
		runtime.UnlockOSThread()
	}
}

func (p *Pin) release() {
	if p.cpu < 0 {
		return
	}
	unix.SchedSetaffinity(0, &p.orig)
	unix.Close(p.stat)
	p.cpu, p.stat = -1, -1
}

// currentCPU returns the CPU the calling thread runs on (getcpu(2)).
func currentCPU() (int, bool) {
	var cpu uint32
	_, _, errno := unix.Syscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return int(cpu), errno == 0
}

// schedStat is /proc/thread-self/schedstat: the thread's time on a CPU and
// its time waiting on a run queue, in ns.
type schedStat struct{ ran, waited uint64 }

func readSchedStat(fd int) (schedStat, bool) {
	var buf [96]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n <= 0 {
		return schedStat{}, false
	}
	return parseSchedStat(buf[:n])
}

// parseSchedStat reads the first two of schedstat's three numbers.
func parseSchedStat(b []byte) (schedStat, bool) {
	ran, rest, ok1 := parseUint(b)
	waited, _, ok2 := parseUint(rest)
	return schedStat{ran, waited}, ok1 && ok2
}

// parseUint reads the decimal number at the start of b after any spaces,
// and returns it with what follows it.
func parseUint(b []byte) (uint64, []byte, bool) {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	var v uint64
	n := 0
	for ; n < len(b) && b[n] >= '0' && b[n] <= '9' && n < 20; n++ {
		v = v*10 + uint64(b[n]-'0')
	}
	return v, b[n:], n > 0 && n < 20
}
