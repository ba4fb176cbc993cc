package client

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/verbs"
)

// dialedDM is device memory the daemon holds, mapped in both.
type dialedDM struct {
	r  *dialed
	dm session.DM
}

// AllocDM asks the daemon for device memory; ENOMEM is the device's (or
// the user's part of it) being taken.
func (r *dialed) AllocDM(length uint64, logAlign int) ([]byte, verbs.DMOps, error) {
	var dm session.DM
	err := r.call(func(c *session.Conn) (err error) { dm, err = c.AllocDM(length, uint32(logAlign)); return err })
	var ce *session.Error
	if errors.As(err, &ce) && ce.Errno == unix.ENOMEM {
		return nil, nil, fmt.Errorf("%w: %w", verbs.ErrNoDeviceMemory, err)
	}
	if err != nil {
		return nil, nil, daemonErr(err)
	}
	return dm.Mem, &dialedDM{r: r, dm: dm}, nil
}

// Free frees the daemon's memory, then unmaps it here.
func (m *dialedDM) Free() error {
	if err := m.r.call(func(c *session.Conn) error { return c.FreeDM(m.dm.Handle) }); err != nil {
		return daemonErr(err)
	}
	return m.dm.Unmap()
}

func (p *dialedPD) RegDMMR(dm *verbs.DM, off, n uint64, access verbs.Access) (*verbs.MR, error) {
	h := dm.Ops().(*dialedDM).dm.Handle
	var r session.MR
	err := p.r.call(func(c *session.Conn) (err error) {
		r, err = c.RegDMMR(p.handle, h, off, n, access|verbs.AccessZeroBased)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register DM MR: %w", daemonErr(err))
	}
	buf := dm.Bytes()[off : off+n : off+n]
	return verbs.NewMR(p.pd, verbs.RegisteredMR{Buf: buf, Addr: 0, LKey: r.LKey, RKey: r.RKey, Access: access},
		&dialedMR{r: p.r, handle: r.Handle}), nil
}
