package session

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// DM is device memory the daemon holds, mapped here too.
type DM struct {
	Handle uint32
	Mem    []byte // whole pages, at least the length asked
}

// AllocDM allocates length bytes of device memory (ibv_alloc_dm) and maps
// the memfd the daemon passes.
func (c *Conn) AllocDM(length uint64, logAlign uint32) (DM, error) {
	var r hostif.HandleReply
	fds, err := c.call(hostif.OpAllocDM, hostif.AllocDMRequest{Length: length, LogAlign: logAlign}, &r)
	if err != nil {
		return DM{}, err
	}
	page := uint64(os.Getpagesize())
	mem, err := mapRing(fds, int((length+page-1)&^(page-1)))
	if err != nil {
		c.FreeDM(r.Handle)
		return DM{}, err
	}
	return DM{Handle: r.Handle, Mem: mem}, nil
}

// FreeDM frees device memory no region is registered in (EBUSY otherwise);
// the caller unmaps its Mem.
func (c *Conn) FreeDM(handle uint32) error {
	_, err := c.call(hostif.OpFreeDM, hostif.HandleRequest{Handle: handle}, &hostif.Empty{})
	return err
}

// Unmap unmaps what AllocDM mapped.
func (dm DM) Unmap() error { return unix.Munmap(dm.Mem) }

// RegDMMR registers n bytes of device memory dm at off in pd, zero-based:
// access must have ibv.AccessZeroBased.
func (c *Conn) RegDMMR(pd, dm uint32, off, n uint64, access ibv.Access) (MR, error) {
	var r hostif.RegMRReply
	req := hostif.RegDMMRRequest{PD: pd, Dm: dm, Access: uint32(access), Offset: off, Length: n}
	_, err := c.call(hostif.OpRegDMMR, req, &r)
	return MR{Handle: r.Handle, LKey: r.LKey, RKey: r.RKey, Len: int(n)}, err
}
