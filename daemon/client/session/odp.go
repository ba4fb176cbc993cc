package session

import (
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// RegMRAt registers length bytes at address addr of this process in pd,
// memory the caller knows to be there or, with ibv.AccessOnDemand, need
// not be (addr 0 and length 2^64-1 is an implicit ODP region).
func (c *Conn) RegMRAt(pd uint32, addr, length uint64, access ibv.Access) (MR, error) {
	var r hostif.RegMRReply
	_, err := c.call(hostif.OpRegMR, hostif.RegMRRequest{PD: pd, Access: uint32(access), Addr: addr, Length: length}, &r)
	return MR{Handle: r.Handle, LKey: r.LKey, RKey: r.RKey, Addr: addr, Len: int(min(length, 1<<62))}, err
}

// AdviseMR gives advice about ranges of pd's ODP regions (ibv_advise_mr),
// hostif.AdviseSGEs of them a request.
func (c *Conn) AdviseMR(pd, advice, flags uint32, sges []ibv.SGE) error {
	for len(sges) > 0 {
		req := hostif.AdviseMRRequest{PD: pd, Advice: advice, Flags: flags}
		n := min(len(sges), hostif.AdviseSGEs)
		for i, s := range sges[:n] {
			req.SGE[i] = hostif.AdviseSGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
		}
		req.Count = uint32(n)
		if _, err := c.call(hostif.OpAdviseMR, req, &hostif.Empty{}); err != nil {
			return err
		}
		sges = sges[n:]
	}
	return nil
}

// ReregMR re-registers region mr (ibv_rereg_mr) and returns its keys.
func (c *Conn) ReregMR(req hostif.ReregMRRequest) (lkey, rkey uint32, err error) {
	var r hostif.RegMRReply
	_, err = c.call(hostif.OpReregMR, req, &r)
	return r.LKey, r.RKey, err
}
