package roce

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// HostQueues are work queues outside the engines that the first engine
// looks at on every pass: the daemon's clients' queues in shared memory,
// which they post to without a system call while the engine polls, as a
// NIC fetches descriptors (docs/HOST-INTERFACE.md). The first engine's
// goroutine is the only caller.
type HostQueues interface {
	// Poll takes the work posted since its last call to the QPs, and
	// reports whether there was any.
	Poll() bool
	// Sleep is called before the engine sleeps. It tells the hosts to
	// ring the doorbell from now on (Device.Wake), looks at the queues
	// once more, and reports false if work came, in which case the
	// engine does not sleep.
	Sleep() bool
	// Awake is called when the engine woke (or did not sleep after all).
	Awake()
}

// SetHostQueues makes the first engine poll h on every pass; nil stops it.
func (d *Device) SetHostQueues(h HostQueues) {
	if h == nil {
		d.lanes[0].host.Store(nil)
		return
	}
	d.lanes[0].host.Store(&h)
}

// hostDoorbell is an eventfd the hosts write to wake the first engine,
// and what to call when it did.
type hostDoorbell struct {
	fd   int
	rang func()
}

// SetHostDoorbell makes the first engine, while it sleeps, wait on the
// eventfd the hosts write to wake it, and call rang when it was woken so,
// if its link can (DoorbellLink) and the device has a Priority: the kernel
// then wakes the engine's raised thread itself. It reports whether it
// will; if so the device owns fd, and closes it once a later call (fd
// negative: none) replaced it and no Wait uses it any more. If not, the
// hosts' doorbell must reach the engine through Wake.
func (d *Device) SetHostDoorbell(fd int, rang func()) bool {
	ln := d.lanes[0]
	if fd < 0 {
		ln.doorbell.Store(nil)
		ln.wake()
		return true
	}
	if _, ok := ln.link.(DoorbellLink); !ok || d.prio == PriorityOff {
		return false
	}
	db := &hostDoorbell{fd: fd, rang: rang}
	// A Wait may still poll fd after it was replaced: closed only once
	// unreachable, the number is not reused under it.
	runtime.AddCleanup(db, func(fd int) { unix.Close(fd) }, fd)
	ln.doorbell.Store(db)
	return true
}

// waitLink is the link's Wait, and the hosts' doorbell's if set.
func (ln *lane) waitLink(wait time.Duration) error {
	db := ln.doorbell.Load()
	if db == nil {
		return ln.link.Wait(wait)
	}
	rung, err := ln.link.(DoorbellLink).WaitDoorbell(db.fd, wait)
	if rung {
		db.rang()
	}
	return err
}

// Wake is the hosts' doorbell: it wakes the first engine if it sleeps.
func (d *Device) Wake() { d.lanes[0].wake() }

// pollHost runs the lane's host queues' Poll, if it has any.
func (ln *lane) pollHost() bool {
	h := ln.host.Load()
	return h != nil && (*h).Poll()
}

// hostSleep prepares the lane's host queues for a sleep and reports
// whether it may sleep; hostAwake ends the sleep.
func (ln *lane) hostSleep() bool {
	h := ln.host.Load()
	return h == nil || (*h).Sleep()
}

func (ln *lane) hostAwake() {
	if h := ln.host.Load(); h != nil {
		(*h).Awake()
	}
}
