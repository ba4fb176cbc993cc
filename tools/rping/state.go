package rping

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
)

// state is rping.c's enum test_state; rping prints its numbers ("wait for
// RDMA_READ_ADV state 10"), so the values are the C ones.
type state int

const (
	stateIdle state = iota + 1
	stateConnectRequest
	stateAddrResolved
	stateRouteResolved
	stateConnected
	stateRDMAReadAdv
	stateRDMAReadComplete
	stateRDMAWriteAdv
	stateRDMAWriteComplete
	stateDisconnected
	stateError
)

// lifetime is one connection as the CM reports it: ctx ends when the CM
// reports the peer's (or our) disconnect, or when the run ends. The loops
// wait for completions under ctx, so a disconnect wakes them as rping's
// DISCONNECTED event posts its semaphore.
type lifetime struct {
	ctx          context.Context
	cancel       context.CancelFunc
	disconnected atomic.Bool
}

func newLifetime(parent context.Context) *lifetime {
	l := &lifetime{}
	l.ctx, l.cancel = context.WithCancel(parent)
	return l
}

// disconnect records the CM's DISCONNECTED event and wakes the loop.
func (l *lifetime) disconnect() {
	l.disconnected.Store(true)
	l.cancel()
}

// logger prints rping's lines: the debug ones (DEBUG_LOG, on stdout with
// -d) and the complaints (on stderr).
type logger struct {
	debug  bool
	stdout io.Writer
	stderr io.Writer
}

// debugf prints a DEBUG_LOG line. Its arguments are boxed before the
// call, so the per-ping calls with arguments test l.debug first.
func (l *logger) debugf(format string, a ...any) {
	if l.debug {
		fmt.Fprintf(l.stdout, format, a...)
	}
}

func (l *logger) errorf(format string, a ...any) {
	fmt.Fprintf(l.stderr, format, a...)
}
