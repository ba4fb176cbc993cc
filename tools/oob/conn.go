package oob

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// DefaultPort is the TCP port both ibv_rc_pingpong and perftest use.
const DefaultPort = 18515

// DefaultTimeout bounds each message of an exchange when the caller gives
// no timeout. Test runs happen between exchanges, so it does not bound them.
const DefaultTimeout = 60 * time.Second

// Errors of malformed messages. Parsers wrap them with detail; test with
// errors.Is.
var (
	ErrMessageLength = errors.New("oob: wrong message length")
	ErrMessageFormat = errors.New("oob: malformed message")
	ErrFieldRange    = errors.New("oob: field out of range")
	ErrVersion       = errors.New("oob: incompatible peer version")
	ErrNotDone       = errors.New("oob: peer did not send \"done\"")
)

// Role says which side of an exchange this end plays. The tools' clients
// write each message first and then read the peer's; servers read first.
type Role int

const (
	// Server is the side started without a peer address; it accepts.
	Server Role = iota
	// Client is the side given the server's address; it connects.
	Client
)

// Messenger carries the messages of an exchange, each whole: the TCP
// connection of the default mode, or with perftest's -R the SENDs of the
// QP that rdma_cm connected for the exchange.
type Messenger interface {
	// Send sends msg as one message, within timeout.
	Send(what string, msg []byte, timeout time.Duration) error
	// Recv receives one message of exactly len(buf) bytes into buf,
	// within timeout.
	Recv(what string, buf []byte, timeout time.Duration) error
}

// connMessenger is a Messenger over a TCP connection with per-message
// deadlines. Each message goes out in one Write because the C tools read
// each message with one read(2) and fail on a short one.
type connMessenger struct{ conn net.Conn }

func (c connMessenger) Send(what string, msg []byte, timeout time.Duration) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("oob: set deadline for %s: %w", what, err)
	}
	if _, err := c.conn.Write(msg); err != nil {
		return fmt.Errorf("oob: send %s: %w", what, err)
	}
	return nil
}

func (c connMessenger) Recv(what string, buf []byte, timeout time.Duration) error {
	if err := c.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("oob: set deadline for %s: %w", what, err)
	}
	if _, err := io.ReadFull(c.conn, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: short %s", ErrMessageLength, what)
		}
		return fmt.Errorf("oob: receive %s: %w", what, err)
	}
	return nil
}

// stream is one side of a lock-step exchange over a Messenger.
type stream struct {
	m       Messenger
	role    Role
	timeout time.Duration
}

func newStream(conn net.Conn, role Role, timeout time.Duration) *stream {
	return newMessageStream(connMessenger{conn}, role, timeout)
}

func newMessageStream(m Messenger, role Role, timeout time.Duration) *stream {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &stream{m: m, role: role, timeout: timeout}
}

func (s *stream) write(what string, msg []byte) error { return s.m.Send(what, msg, s.timeout) }

func (s *stream) read(what string, buf []byte) error { return s.m.Recv(what, buf, s.timeout) }

// exchange sends mine and receives the peer's message of len(theirs) bytes,
// in the order the role dictates.
func (s *stream) exchange(what string, mine, theirs []byte) error {
	if s.role == Client {
		if err := s.write(what, mine); err != nil {
			return err
		}
		return s.read(what, theirs)
	}
	if err := s.read(what, theirs); err != nil {
		return err
	}
	return s.write(what, mine)
}

// swap exchanges mine for the peer's message of n bytes, unless making
// mine failed with formatErr, which it then returns.
func (s *stream) swap(what string, n int, mine []byte, formatErr error) ([]byte, error) {
	if formatErr != nil {
		return nil, formatErr
	}
	theirs := make([]byte, n)
	if err := s.exchange(what, mine, theirs); err != nil {
		return nil, err
	}
	return theirs, nil
}

// hexField parses exactly len(b) hexadecimal digits (either case).
func hexField(b []byte, name string) (uint64, error) {
	if len(b) == 0 || len(b) > 16 {
		return 0, fmt.Errorf("%w: %s has %d digits", ErrMessageFormat, name, len(b))
	}
	var v uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: %s has non-hex byte %q", ErrMessageFormat, name, c)
		}
		v = v<<4 | uint64(d)
	}
	return v, nil
}

const hexDigits = "0123456789abcdef"

// putHex writes v as exactly len(b) lower-case hex digits, like %0Nx for a
// value that fits.
func putHex(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = hexDigits[v&0xf]
		v >>= 4
	}
}
