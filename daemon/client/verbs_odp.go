package client

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// RegImplicitMR registers this process's whole address space as an
// implicit ODP region in the daemon: it reaches the pages as SGEs and
// peers name them.
func (p *dialedPD) RegImplicitMR(access verbs.Access) (*verbs.MR, error) {
	var r session.MR
	err := p.r.call(func(c *session.Conn) (err error) {
		r, err = c.RegMRAt(p.handle, 0, math.MaxUint64, access)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register implicit MR: %w", daemonErr(err))
	}
	mr := verbs.NewMR(p.pd, verbs.RegisteredMR{Addr: 0, LKey: r.LKey, RKey: r.RKey, Access: access},
		&dialedMR{r: p.r, handle: r.Handle})
	mr.Reregistered(p.pd, verbs.RegisteredMR{LKey: r.LKey, RKey: r.RKey, Access: access}, math.MaxUint64)
	return mr, nil
}

func (p *dialedPD) AdviseMR(advice verbs.Advice, flags uint32, sges []verbs.SGE) error {
	err := p.r.call(func(c *session.Conn) error { return c.AdviseMR(p.handle, uint32(advice), flags, sges) })
	if err != nil {
		return fmt.Errorf("advise MR: %w", daemonErr(err))
	}
	return nil
}

func (m *dialedMR) Rereg(mr *verbs.MR, flags verbs.ReregFlags, pd *verbs.PD, buf []byte, access verbs.Access) error {
	req := hostif.ReregMRRequest{Handle: m.handle, Flags: uint32(flags), Access: uint32(access)}
	if flags&verbs.ReregChangePD != 0 {
		dp, ok := pd.Backend().(*dialedPD)
		if !ok || dp.r != m.r {
			return fmt.Errorf("rereg MR: PD of another device: %w", verbs.ErrInvalidArgument)
		}
		req.PD = dp.handle
	}
	if flags&verbs.ReregChangeTranslation != 0 {
		req.Addr, req.Length = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), uint64(len(buf))
	}
	var lkey, rkey uint32
	err := m.r.call(func(c *session.Conn) (err error) { lkey, rkey, err = c.ReregMR(req); return err })
	if err != nil {
		return fmt.Errorf("rereg MR: %w", daemonErr(err))
	}
	r := verbs.RegisteredMR{Buf: mr.Bytes(), Addr: mr.Addr(), LKey: lkey, RKey: rkey, Access: mr.Access()}
	length := uint64(mr.Len())
	if flags&verbs.ReregChangeTranslation != 0 {
		r.Buf, r.Addr, length = buf, req.Addr, req.Length
	}
	if flags&verbs.ReregChangeAccess != 0 {
		r.Access = access
	}
	if flags&verbs.ReregChangePD == 0 {
		pd = mr.PD()
	}
	mr.Reregistered(pd, r, length)
	return nil
}
