package roce

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
