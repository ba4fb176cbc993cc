package rping

import (
	"errors"
	"strings"
	"syscall"

	"github.com/softnic/softnic/rdmacm"
)

// connParam is rping_init_conn_param: one READ each way, retries 7
// (forever for RNR).
func connParam() *rdmacm.ConnParam {
	return &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}

// acceptParam is what the server accepts with. rping passes librdmacm no
// parameters, which then answers with the request's resources, turned to
// its side and capped by the device, and retries 7; with -q it passes its
// own (connParam).
func acceptParam(cfg *Config, req rdmacm.ConnParam, maxRd int) *rdmacm.ConnParam {
	if cfg.SelfCreateQP {
		return connParam()
	}
	capped := func(n uint8) uint8 { return uint8(min(int(n), maxRd)) }
	return &rdmacm.ConnParam{ResponderResources: capped(req.InitiatorDepth), InitiatorDepth: capped(req.ResponderResources),
		RetryCount: 7, RNRRetryCount: 7}
}

// isErrorEvent reports the events rping's CM handler treats as fatal: it
// prints "cma event ..., error N" and the process exits with 255.
func isErrorEvent(t rdmacm.EventType) bool {
	switch t {
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError,
		rdmacm.EventUnreachable, rdmacm.EventRejected:
		return true
	}
	return false
}

// eventStatus is the status rping prints with an error event, as the
// kernel's rdma_cm reports it: a REJ's reason (8 when nobody listens on
// the port), else a negative errno.
func eventStatus(ev rdmacm.Event) int {
	if ev.Type == rdmacm.EventRejected {
		return int(ev.Reason)
	}
	if ev.Type == rdmacm.EventUnreachable && errnoOf(ev.Err) == syscall.EINVAL {
		return -int(syscall.ETIMEDOUT)
	}
	return -int(errnoOf(ev.Err))
}

// errnoOf is the errno librdmacm would have set for err.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, rdmacm.ErrTimedOut):
		return syscall.ETIMEDOUT
	case errors.Is(err, rdmacm.ErrNoDevice):
		return syscall.ENODEV
	case errors.Is(err, rdmacm.ErrNoRoute):
		return syscall.ENETUNREACH
	default:
		return syscall.EINVAL
	}
}

// perror is what C's perror(what) prints for err: glibc's message for
// its errno, which Go's table has in lower case.
func perror(what string, err error) string {
	msg := errnoOf(err).Error()
	if msg != "" {
		msg = strings.ToUpper(msg[:1]) + msg[1:]
	}
	return what + ": " + msg + "\n"
}

// reportError prints rping's line for an error event and returns the
// failure that ends the run.
func (l *logger) reportError(ev rdmacm.Event) error {
	l.errorf("cma event %s, error %d\n", ev.Type, eventStatus(ev))
	reason := "rping: " + ev.Type.String()
	if ev.Err != nil {
		reason += ": " + ev.Err.Error()
	}
	return failed(reason)
}

// logEvent is the debug line rping's CM handler starts with.
func (l *logger) logEvent(ev rdmacm.Event, parent *rdmacm.ID) {
	if !l.debug {
		return
	}
	which := "child"
	if ev.ID == parent {
		which = "parent"
	}
	l.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, which)
}
