package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// Config describes how the daemon serves a device.
type Config struct {
	// Socket is the control socket's path (/run/softnic/DEVICE.sock).
	Socket string
	// Mode is the socket's permission bits (default 0666: every local user,
	// as /dev/infiniband/uverbs* is); Group, if not -1, its group. The zero
	// Config means group unchanged.
	Mode  os.FileMode
	Group int
	// Log receives the sessions' comings and goings (default slog's).
	Log *slog.Logger
	// Limits bound what each user can make the daemon hold.
	Limits Limits
	// CMRoute and CMNeighbor are the connection manager's routing table
	// and neighbour resolution (rdmacm.Config's Route and Neighbor: the
	// kernel's, as rdma_resolve_addr asks them, within the caller's
	// timeout). Nil: the device's first address of the destination's IP
	// version, and peers resolved when a QP first sends to them.
	CMRoute    func(dst netip.Addr) (netip.Addr, error)
	CMNeighbor func(dev *verbs.Device, peer netip.Addr, timeout time.Duration) error
}

// Server serves one device to local processes.
type Server struct {
	dev *verbs.Device
	cfg Config
	ln  *net.UnixListener
	// doorbellFD is the eventfd clients write when the engine sleeps;
	// doorbell holds it for ringDoorbell (nil if the device's engine
	// waits on it itself, roce.Device.SetHostDoorbell; os.File.Fd would
	// make it blocking); rings counts the wake-ups it brought.
	doorbell   *os.File
	doorbellFD int
	rings      atomic.Uint64
	host       hostQueues
	accts      *accounts
	counters   serverCounters
	dmUsed     atomic.Int64 // bytes of the device's memory allocated (dm.go)

	mu       sync.Mutex
	sessions map[*session]struct{}
	// owners maps the sessions' CQs and QPs to their owners, for events.
	owners map[any]owner
	closed bool
	quit   chan struct{}
	wg     sync.WaitGroup
}

// Serve starts serving dev on cfg.Socket; the device must stay open until
// Close returns.
func Serve(dev *verbs.Device, cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Mode == 0 {
		cfg.Mode = 0o666
	}
	os.Remove(cfg.Socket) // a socket file a killed daemon left; the caller holds the device's lock
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("daemon: listen: %w", err)
	}
	if err := setSocketAccess(cfg); err != nil {
		ln.Close()
		return nil, err
	}
	// Connections take SO_PASSCRED from the listener, so that even a
	// message sent before the accept carries its sender's credentials.
	if err := passCredentials(ln); err != nil {
		ln.Close()
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: eventfd: %w", err)
	}
	s := &Server{dev: dev, cfg: cfg, ln: ln, doorbellFD: efd,
		sessions: map[*session]struct{}{}, owners: map[any]owner{}, quit: make(chan struct{}),
		accts: newAccounts(cfg.Limits)}
	s.host.init()
	dev.RoCE().SetHostQueues(&s.host)
	s.wg.Add(3)
	// The engine waits on the doorbell itself where it can, woken by the
	// kernel at its priority; elsewhere a goroutine wakes it.
	if !dev.RoCE().SetHostDoorbell(efd, func() { s.rings.Add(1) }) {
		s.doorbell = os.NewFile(uintptr(efd), "softnic-doorbell")
		s.wg.Add(1)
		go s.ringDoorbell()
	}
	go s.accept()
	go s.deliverEvents()
	go s.checkSessions()
	return s, nil
}

func passCredentials(ln *net.UnixListener) error {
	raw, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("daemon: SO_PASSCRED: %w", serr)
	}
	return nil
}

func setSocketAccess(cfg Config) error {
	if cfg.Group > 0 {
		if err := os.Chown(cfg.Socket, -1, cfg.Group); err != nil {
			return fmt.Errorf("daemon: socket group: %w", err)
		}
	}
	if err := os.Chmod(cfg.Socket, cfg.Mode); err != nil {
		return fmt.Errorf("daemon: socket mode: %w", err)
	}
	return nil
}

// accept takes connections until the server closes. A failed accept (the
// daemon out of descriptors, say) is logged, counted and tried again
// after a pause that doubles up to a second, so that the daemon serves
// again as soon as it can.
func (s *Server) accept() {
	defer s.wg.Done()
	var pause time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err == nil {
			pause = 0
			s.admit(c)
			continue
		}
		select {
		case <-s.quit:
			return
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		s.counters.AcceptErrors.Add(1)
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		s.cfg.Log.Warn("accept failed, trying again", "err", err, "after", pause)
		select {
		case <-time.After(pause):
		case <-s.quit:
			return
		}
	}
}

// admit opens a session for a new connection, within its user's bounds,
// and serves it on a goroutine of its own.
func (s *Server) admit(c *net.UnixConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return
	}
	var p peer
	raw.Control(func(fd uintptr) { p, err = peerOf(int(fd)) })
	if err != nil {
		s.cfg.Log.Warn("session refused", "err", err)
		c.Close()
		return
	}
	ss, err := s.open(c, p)
	if err != nil {
		s.counters.SessionsRefused.Add(1)
		s.cfg.Log.Warn("session refused", "pid", p.pid, "uid", p.uid, "err", err)
		refuse(c, err)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.end()
		return
	}
	s.sessions[ss] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ss.serve()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
}

// open charges a new connection to its user: a session, and the two
// descriptors it holds (the socket and the process's pidfd, which it
// closes when it fails).
func (s *Server) open(c *net.UnixConn, p peer) (*session, error) {
	a, err := s.accts.open(p.uid)
	if err != nil {
		unix.Close(p.pidfd)
		return nil, err
	}
	ss := newSession(s, c, p, a)
	if err := ss.take(resDescriptor, 2); err != nil {
		unix.Close(p.pidfd)
		s.accts.endSession(a, &ss.held)
		return nil, err
	}
	if err := s.watch(ss); err != nil { // it closed the pidfd
		s.accts.endSession(a, &ss.held)
		return nil, err
	}
	return ss, nil
}

// refuse answers a connection the daemon will not serve with one reply
// to its hello, carrying the errno, and closes it.
func refuse(c *net.UnixConn, err error) {
	var buf [hostif.HeaderLen]byte
	msg, _ := hostif.Encode(buf[:], hostif.Header{Op: hostif.OpHello, Status: -int32(errnoOf(err))}, hostif.Empty{})
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write(msg)
	c.Close()
}

// ringDoorbell wakes the engine when a client rang the doorbell eventfd.
func (s *Server) ringDoorbell() {
	defer s.wg.Done()
	var v [8]byte
	for {
		if _, err := s.doorbell.Read(v[:]); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		s.rings.Add(1)
		s.dev.RoCE().Wake()
	}
}

// Doorbells returns how many times clients woke the sleeping engine.
func (s *Server) Doorbells() uint64 { return s.rings.Load() }

// betweenPasses returns once every engine has finished the pass it was in,
// if any (Group.Do runs while all are between passes): a pass that read a
// ring or page before it was taken off the engine's lists has ended.
func (s *Server) betweenPasses() { s.dev.RoCE().Group().Do(func() error { return nil }) }

// Socket returns the control socket's path.
func (s *Server) Socket() string { return s.cfg.Socket }

// Sessions returns how many clients are connected.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Close stops serving: it ends every session (their QPs destroyed, their
// regions dropped) and removes the socket.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	// Wake each session's goroutine without closing its socket: it
	// destroys the session's QPs before it closes the socket, so that a
	// client that leaves on seeing the socket close leaves no QP behind
	// answering its peer from memory that is gone.
	for ss := range s.sessions {
		ss.conn.SetDeadline(time.Unix(1, 0)) // a write to a client that reads nothing, too
	}
	s.mu.Unlock()
	s.ln.Close()
	if s.doorbell != nil {
		s.doorbell.Close()
	} else {
		s.dev.RoCE().SetHostDoorbell(-1, nil) // the device closes the eventfd
	}
	close(s.quit)
	s.wg.Wait()
	s.dev.RoCE().SetHostQueues(nil)
	os.Remove(s.cfg.Socket)
	return nil
}
