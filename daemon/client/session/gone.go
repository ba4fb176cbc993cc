package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// watch starts a goroutine that marks the connection gone when the
// daemon's end of the control socket closes. It waits in the Go runtime's
// poller on a duplicate of the socket, so posts and polls pay only an
// atomic load for the check; it wakes once or twice per control call
// (a reply is an event on the socket), looks whether the socket hung up,
// and waits again. Close ends it.
func (c *Conn) watch() error {
	var err error
	if c.watcher, err = PollableDup(c.c, "softnic-control-watch"); err != nil {
		return fmt.Errorf("softnic daemon: watch the control socket: %w", err)
	}
	wraw, err := c.watcher.SyscallConn()
	if err != nil {
		c.watcher.Close()
		c.watcher = nil
		return err
	}
	go func() {
		hung := false
		// Read returns when the function says so, or with an error once
		// Close closed the duplicate.
		wraw.Read(func(fd uintptr) bool {
			hung = hungUp(int(fd))
			return hung
		})
		if hung {
			c.markGone()
		}
	}()
	return nil
}

// hungUp reports whether the peer of the socket fd has closed its end.
// poll reports POLLHUP whatever the events asked for, and without
// POLLIN a reply waiting to be read does not answer.
func hungUp(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR) != 0
	}
}

func (c *Conn) markGone() {
	if c.gone.CompareAndSwap(false, true) {
		close(c.goneCh)
	}
}

// lost turns an error of the control socket into the call's error: the
// end of the socket or a broken pipe means the daemon is gone.
func (c *Conn) lost(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		c.markGone()
		return ErrDaemonGone
	}
	return fmt.Errorf("softnic daemon: %w", err)
}

// Err returns ErrDaemonGone once the daemon closed the session, and nil
// before.
func (c *Conn) Err() error {
	if c.gone.Load() {
		return ErrDaemonGone
	}
	return nil
}

// Done is closed when the daemon closes the session: a program waiting on
// something else selects on it too, as a libibverbs program reads
// IBV_EVENT_DEVICE_FATAL from its async events.
func (c *Conn) Done() <-chan struct{} { return c.goneCh }

// PollableDup returns a duplicate of sc's descriptor, non-blocking, as a
// file the Go runtime's poller watches: a goroutine may wait on it, and
// closing it ends the wait (a blocking descriptor's read cannot be
// interrupted so). The original shares O_NONBLOCK with the duplicate.
func PollableDup(sc syscall.Conn, name string) (*os.File, error) {
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("duplicate %s: %w", name, derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}
