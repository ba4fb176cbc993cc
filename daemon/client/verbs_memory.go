package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
)

// AllocMemory makes n bytes of a sealed memfd, maps it and shares it with
// the daemon.
func (r *dialed) AllocMemory(n int) ([]byte, uint32, error) {
	fd, err := unix.MemfdCreate("softnic-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, 0, fmt.Errorf("alloc memory: memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, 0, fmt.Errorf("alloc memory: %w", err)
	}
	// Sealed so that neither side can shrink it under the other's copies.
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return nil, 0, fmt.Errorf("alloc memory: seal memfd: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("alloc memory: %w", err)
	}
	var h uint32
	err = r.call(func(c *session.Conn) (err error) { h, err = c.ShareMemory(mem, fd); return err })
	if err != nil {
		unix.Munmap(mem)
		return nil, 0, fmt.Errorf("alloc memory: %w", daemonErr(err))
	}
	return mem, h, nil
}

// FreeMemory unshares the memory. Unless regions are still registered in
// it, any failure (the daemon is gone) leaves nothing of it mapped there.
func (r *dialed) FreeMemory(_ []byte, handle uint32) error {
	err := r.call(func(c *session.Conn) error { return c.UnshareMemory(handle) })
	var ce *session.Error
	if errors.As(err, &ce) && ce.Errno == unix.EBUSY {
		return fmt.Errorf("free memory: regions are registered in it: %w", daemonErr(err))
	}
	return nil
}
