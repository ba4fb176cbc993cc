package netnstest

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// WithoutCapabilities runs fn on an OS thread whose effective capability
// set lacks caps (unix.CAP_* numbers; nil drops them all), to test how code
// behaves without privileges while the test itself runs as root.
// Capabilities are per thread, so the rest of the process keeps its own;
// the permitted set is untouched, so the thread gets them back afterwards.
// fn must not start goroutines that expect to run without the capabilities.
func WithoutCapabilities(caps []int, fn func() error) error {
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved [2]unix.CapUserData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("capget: %w", err)
	}
	reduced := saved
	if caps == nil {
		reduced[0].Effective, reduced[1].Effective = 0, 0
	}
	for _, c := range caps {
		reduced[c/32].Effective &^= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &reduced[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("capset: %w", err)
	}
	defer func() {
		if err := unix.Capset(&hdr, &saved[0]); err != nil {
			return // leave the thread locked: the runtime discards it
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}
