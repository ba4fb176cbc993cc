package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// rping.c's constants.
const (
	// DefaultPort is rping's port (-p).
	DefaultPort = 7174
	// DefaultSize is the ping data size without -S.
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE: room for "rdma-ping-2147483647: " and
	// its NUL, computed as rping does (sizeof "2147483647" + sizeof
	// "rdma-ping-%d: ").
	MinSize = len("2147483647") + 1 + len("rdma-ping-%d: ") + 1
	// BufSize is RPING_BUFSIZE; sizes up to BufSize-1 are valid.
	BufSize = 64 * 1024

	sqDepth        = 16          // RPING_SQ_DEPTH: send queue
	rqDepth        = 2           // receive queue (rping posts one)
	cqDepth        = 2 * sqDepth // one CQ for sends and receives
	listenBacklog  = 3
	resolveTimeout = 2000 * time.Millisecond
)

// Config holds rping's options.
type Config struct {
	Server bool // -s; otherwise -c
	// Persistent is -P: the server serves one connection after another
	// (each on its own goroutine) until the run ends.
	Persistent bool
	// Addr is -a: the server's address; for a server, an unspecified or
	// zero address listens on every address of the device.
	Addr netip.Addr
	// Source is -I: the client's source address (zero: by route).
	Source netip.Addr
	Port   uint16 // -p
	Count  int    // -C: pings of the client; 0 pings until interrupted
	Size   int    // -S
	// Verbose is -v: print the ping data (the server what it read, the
	// client what came back).
	Verbose bool
	// Validate is -V: the client compares what came back with what it
	// sent.
	Validate bool
	// Debug is -d: rping's DEBUG_LOG lines on Stdout.
	Debug bool
	// SelfCreateQP is -q. rping then creates and moves its QP itself,
	// which changes nothing on the wire but one thing: its server accepts
	// with its own connection parameters instead of the request's. The
	// CM creates and moves the QP here either way; -q keeps that one
	// difference.
	SelfCreateQP bool

	Stdout, Stderr io.Writer
}

// DefaultConfig returns rping's defaults.
func DefaultConfig() Config {
	return Config{Port: DefaultPort, Size: DefaultSize, Stdout: io.Discard, Stderr: io.Discard}
}

// CheckSize returns rping's complaint about a -S size out of range.
func CheckSize(size int) error {
	if size < MinSize || size > BufSize-1 {
		return fmt.Errorf("Invalid size %d (valid range is %d to %d)", size, MinSize, BufSize)
	}
	return nil
}

// CheckCount returns rping's complaint about a negative -C count.
func CheckCount(count int) error {
	if count < 0 {
		return fmt.Errorf("Invalid count %d", count)
	}
	return nil
}

// Failure is a failed run whose reasons rping's lines have already told;
// Status is the exit status rping would have.
type Failure struct {
	Status int
	Reason string
}

func (f *Failure) Error() string { return f.Reason }

// failed is the failure of most of rping's paths: main returns -1, the
// process exits with 255.
func failed(reason string) error { return &Failure{Status: 255, Reason: reason} }

// ExitStatus returns the process exit status for Run's error.
func ExitStatus(err error) int {
	var f *Failure
	switch {
	case err == nil:
		return 0
	case errors.As(err, &f):
		return f.Status
	default:
		return 255
	}
}

// interrupted is the failure of a run stopped from outside: rping dies of
// the signal, which a shell reports as 128+SIGINT.
func interrupted(err error) error { return &Failure{Status: 130, Reason: err.Error()} }

// loopFailure is the failure of a test loop that ended with err.
func loopFailure(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return interrupted(err)
	}
	return failed(err.Error())
}
