package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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
}

// Server serves one device to local processes.
type Server struct {
	dev *verbs.Device
	cfg Config
	ln  *net.UnixListener
	// doorbell is the eventfd clients write when the engine sleeps
	// (doorbellFD, passed to them: os.File.Fd would make it blocking);
	// rings counts the wake-ups it brought.
	doorbell   *os.File
	doorbellFD int
	rings      atomic.Uint64
	host       hostQueues

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
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: eventfd: %w", err)
	}
	s := &Server{dev: dev, cfg: cfg, ln: ln, doorbell: os.NewFile(uintptr(efd), "softnic-doorbell"), doorbellFD: efd,
		sessions: map[*session]struct{}{}, owners: map[any]owner{}, quit: make(chan struct{})}
	s.host.init()
	dev.RoCE().SetHostQueues(&s.host)
	s.wg.Add(3)
	go s.accept()
	go s.ringDoorbell()
	go s.deliverEvents()
	return s, nil
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

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		ss, err := newSession(s, c)
		if err != nil {
			s.cfg.Log.Warn("session refused", "err", err)
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			ss.end()
			continue
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
		ss.conn.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	s.ln.Close()
	s.doorbell.Close()
	close(s.quit)
	s.wg.Wait()
	s.dev.RoCE().SetHostQueues(nil)
	os.Remove(s.cfg.Socket)
	return nil
}
