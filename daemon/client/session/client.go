// Package session is a session with a softnic daemon at the level of
// its host interface (docs/HOST-INTERFACE.md): it opens the session,
// creates objects through the control socket by handle, and posts and
// polls through the shared rings without system calls while the daemon
// polls. It needs only the interface's layouts and the IB vocabulary,
// not the engine. Package daemon/client builds the verbs and rdma_cm
// backends on it; tests and tools that speak the protocol itself use it
// directly.
//
//	c, err := session.Dial("/run/softnic/softnic_eth0.sock")
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	pd, err := c.AllocPD()
package session

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
)

// Conn is a session with the daemon. Its control calls are not safe for
// concurrent use.
type Conn struct {
	c        *net.UnixConn
	seq      uint32
	page     []byte
	doorbell int
	// Async is the session's async event pipe (16-byte records).
	Async *os.File
	// Device is the device's limits, from the hello exchange.
	Device   hostif.HelloReply
	in, out  []byte
	oob      []byte
	sleeping *uint32
	rung     *uint32
	// gone is set, and goneCh closed, once the daemon's end of the
	// control socket closed; watcher is the socket's duplicate on which
	// a goroutine waits for that.
	gone    atomic.Bool
	goneCh  chan struct{}
	watcher *os.File
}

// ErrDaemonGone is returned by every call, post and empty poll once the
// daemon closed the session's control socket: it stopped or was killed,
// and the session's objects are gone with it. It is the client's
// IBV_EVENT_DEVICE_FATAL: completions already in a CQ's ring are still
// polled, nothing more will come.
var ErrDaemonGone = errors.New("softnic daemon: the daemon is gone (its control socket closed)")

// Error is a command the daemon refused, with its errno.
type Error struct {
	Op    hostif.Op
	Errno unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("softnic daemon: %v: %v", e.Op, e.Errno) }

// Unwrap lets errors.Is match the errno.
func (e *Error) Unwrap() error { return e.Errno }

// connect opens a connection to the daemon listening on socket, without
// a session yet.
func connect(socket string) (*Conn, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("softnic daemon at %s: %w", socket, err)
	}
	return &Conn{c: uc, in: make([]byte, hostif.MaxMessage), out: make([]byte, hostif.MaxMessage),
		oob: make([]byte, unix.CmsgSpace(4*4)), goneCh: make(chan struct{})}, nil
}

// Dial opens a session with the daemon listening on socket. With hello
// it passes its own /proc/self/mem and /proc/self/maps, through which
// alone the daemon reaches its memory (docs/HOST-INTERFACE.md): they name
// this address space, and only while it lasts.
func Dial(socket string) (*Conn, error) {
	c, err := connect(socket)
	if err != nil {
		return nil, err
	}
	uc := c.c
	mem, err := selfMemory()
	if err != nil {
		uc.Close()
		return nil, err
	}
	fds, err := c.callFD(hostif.OpHello, hostif.HelloRequest{Version: hostif.Version}, &c.Device, mem[:]...)
	closeAll(mem[:])
	if err == nil && len(fds) != 3 {
		err = fmt.Errorf("softnic daemon: hello passed %d descriptors: %w", len(fds), hostif.ErrMessage)
	}
	if err != nil {
		closeAll(fds)
		uc.Close()
		return nil, err
	}
	c.page, err = unix.Mmap(fds[0], 0, hostif.SessionPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		closeAll(fds[1:])
		uc.Close()
		return nil, fmt.Errorf("softnic daemon: session page: %w", err)
	}
	c.Async, c.doorbell = os.NewFile(uintptr(fds[1]), "softnic-async"), fds[2]
	c.rung = (*uint32)(unsafe.Pointer(&c.page[hostif.PageDoorbell]))
	c.sleeping = (*uint32)(unsafe.Pointer(&c.page[hostif.PageSleeping]))
	if err := c.watch(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// selfMemory opens this process's mem and maps files for hello, in the
// order hello passes them.
func selfMemory() ([hostif.HelloFDs]int, error) {
	var fds [hostif.HelloFDs]int
	mem, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fds, fmt.Errorf("softnic daemon: open /proc/self/mem: %w", err)
	}
	maps, err := unix.Open("/proc/self/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mem)
		return fds, fmt.Errorf("softnic daemon: open /proc/self/maps: %w", err)
	}
	fds[hostif.HelloMemFD], fds[hostif.HelloMapsFD] = mem, maps
	return fds, nil
}

// SyscallConn returns the control socket's raw connection, for a program
// that hands its descriptor on (as a forked child inherits it): the
// daemon serves only the process that connected.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.c.SyscallConn() }

// Close ends the session: the daemon destroys its objects.
func (c *Conn) Close() error {
	if c.watcher != nil {
		c.watcher.Close()
	}
	err := c.c.Close()
	unix.Munmap(c.page)
	c.Async.Close()
	unix.Close(c.doorbell)
	return err
}

// call sends a command and decodes its reply into reply, returning the
// descriptors that came with it.
func (c *Conn) call(op hostif.Op, body, reply any) ([]int, error) {
	return c.callFD(op, body, reply)
}

// callFD is call, passing descriptors fds with the command.
func (c *Conn) callFD(op hostif.Op, body, reply any, fds ...int) ([]int, error) {
	c.seq++
	msg, err := hostif.Encode(c.out, hostif.Header{Op: op, Seq: c.seq}, body)
	if err != nil {
		return nil, err
	}
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	if _, _, err := c.c.WriteMsgUnix(msg, rights, nil); err != nil {
		if op == hostif.OpHello {
			return nil, c.refusal(err)
		}
		return nil, c.lost(err)
	}
	n, oobn, _, _, err := c.c.ReadMsgUnix(c.in, c.oob)
	if err != nil {
		if op == hostif.OpHello {
			return nil, c.refusal(err)
		}
		return nil, c.lost(err)
	}
	got := parseRights(c.oob[:oobn])
	h, err := hostif.DecodeHeader(c.in[:n])
	switch {
	case err != nil:
	case op == hostif.OpHello && h.Op == op && h.Status != 0:
		// A connection the daemon will not serve (its user's session
		// bound) gets this reply before it asked.
		err = &Error{Op: op, Errno: unix.Errno(-h.Status)}
	case h.Op != op || h.Seq != c.seq:
		err = fmt.Errorf("%w: reply %v/%d to %v/%d", hostif.ErrMessage, h.Op, h.Seq, op, c.seq)
	case h.Status != 0:
		err = &Error{Op: op, Errno: unix.Errno(-h.Status)}
	default:
		err = hostif.DecodeBody(c.in[:n], reply)
	}
	if err != nil {
		closeAll(got)
		return nil, err
	}
	return got, nil
}

// refusal is the error of a hello whose send or reply failed with err: a
// connection the daemon refused was answered and closed at once, and the
// answer may still wait to be read (a read first fails with ECONNRESET
// when the daemon closed with the hello unread).
func (c *Conn) refusal(err error) error {
	c.c.SetReadDeadline(time.Now().Add(time.Second))
	for range 2 {
		n, _, _, _, rerr := c.c.ReadMsgUnix(c.in, c.oob)
		if rerr != nil {
			continue
		}
		if h, herr := hostif.DecodeHeader(c.in[:n]); herr == nil && h.Op == hostif.OpHello && h.Status != 0 {
			return &Error{Op: hostif.OpHello, Errno: unix.Errno(-h.Status)}
		}
		break
	}
	return c.lost(err)
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// ring tells the daemon that work was posted: the doorbell word, and the
// eventfd only when the daemon sleeps (the full fences of sync/atomic
// order the increment before the read).
func (c *Conn) ring() {
	atomic.AddUint32(c.rung, 1)
	if atomic.LoadUint32(c.sleeping) != 0 {
		var one = [8]byte{1}
		unix.Write(c.doorbell, one[:])
	}
}

// EngineSleeping reports whether the daemon's engine says it sleeps: a
// post now rings the eventfd as well.
func (c *Conn) EngineSleeping() bool { return atomic.LoadUint32(c.sleeping) != 0 }

// ErrQueueFull is returned by a post to a full queue.
var ErrQueueFull = errors.New("softnic daemon: work queue full")

// Raw sends msg as it is and waits up to timeout for any reply: for tests
// that speak to the daemon out of protocol.
func (c *Conn) Raw(msg []byte, timeout time.Duration) error {
	if _, err := c.c.Write(msg); err != nil {
		return err
	}
	c.c.SetReadDeadline(time.Now().Add(timeout))
	defer c.c.SetReadDeadline(time.Time{})
	n, oobn, _, _, err := c.c.ReadMsgUnix(c.in, c.oob)
	closeAll(parseRights(c.oob[:oobn]))
	if err == nil && n == 0 {
		err = net.ErrClosed
	}
	return err
}
