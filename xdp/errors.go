package xdp

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Errors of Open and the data path, matchable with errors.Is. An error from
// a failed system call wraps the errno too, so errors.Is(err, unix.EBUSY)
// also works.
var (
	ErrConfig         = errors.New("invalid AF_XDP socket configuration")
	ErrNoInterface    = errors.New("no such network interface")
	ErrNoQueue        = errors.New("no such receive queue on the interface")
	ErrPermission     = errors.New("not permitted: AF_XDP sockets need root (CAP_NET_RAW, CAP_NET_ADMIN)")
	ErrUMEM           = errors.New("cannot allocate or register the UMEM: too large, or the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) is too low")
	ErrMemlock        = fmt.Errorf("the UMEM exceeds the locked-memory limit: %w", ErrUMEM)
	ErrQueueBusy      = errors.New("the queue already has an AF_XDP socket or is in use")
	ErrNoZeroCopy     = errors.New("the driver does not offer zero-copy AF_XDP on this queue")
	ErrNoMultiBuffer  = errors.New("the driver does not support multi-buffer AF_XDP (XDP_USE_SG)")
	ErrNotSupported   = errors.New("AF_XDP is not supported by this kernel")
	ErrClosed         = errors.New("AF_XDP socket closed")
	ErrFrameOwnership = errors.New("UMEM frame handed back twice or not owned by the caller")
)

// socketError explains why socket(AF_XDP) failed.
func socketError(err error) error {
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, unix.EAFNOSUPPORT):
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return fmt.Errorf("socket(AF_XDP): %w", err)
}

// bindError explains why bind failed; the errno alone is ambiguous (EOPNOTSUPP
// means no zero-copy or no multi-buffer depending on what was asked for).
func bindError(err error, cfg *Config, ifindex, queue int) error {
	var cause error
	switch {
	case errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO):
		cause = ErrNoInterface
	case errors.Is(err, unix.EBUSY):
		cause = ErrQueueBusy
	case errors.Is(err, unix.EPERM):
		cause = ErrPermission
	case errors.Is(err, unix.EOPNOTSUPP) && cfg.Mode == ModeZeroCopy:
		return fmt.Errorf("bind: %w%s: %w", ErrNoZeroCopy, zeroCopyWhy(ifindex, cfg.MultiBuffer), err)
	case errors.Is(err, unix.EOPNOTSUPP) && cfg.MultiBuffer:
		cause = ErrNoMultiBuffer
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("bind: %w (queue %d; or the interface is down): %w", ErrNoQueue, queue, err)
	default:
		return fmt.Errorf("bind: %w", err)
	}
	return fmt.Errorf("bind: %w: %w", cause, err)
}

// zeroCopyWhy says, from what the driver advertises, why the kernel
// refused zero-copy, or nothing where the driver cannot be asked.
func zeroCopyWhy(ifindex int, multiBuffer bool) string {
	f, err := QueryDriverFeatures(ifindex)
	switch {
	case err != nil:
		return ""
	case !f.ZeroCopy():
		return fmt.Sprintf(" (the driver advertises no xsk-zerocopy: %v)", f)
	case multiBuffer && f.ZCMaxSegs <= 1:
		return fmt.Sprintf(" (multi-buffer frames: the driver's zero-copy takes one buffer a frame: %v)", f)
	}
	return fmt.Sprintf(" (%v)", f)
}
