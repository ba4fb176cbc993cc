package session

import (
	"os"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// What the C provider's ibv_import_pd, ibv_import_mr and ibv_import_dm
// ask about the session's own handles (a second context of one session
// has the handles but not what the objects know of themselves).

// QueryPD reports whether the session has PD pd (ENOENT otherwise).
func (c *Conn) QueryPD(pd uint32) error {
	_, err := c.call(hostif.OpQueryPD, hostif.HandleRequest{Handle: pd}, &hostif.Empty{})
	return err
}

// ImportedMR is what the daemon says of a region: its PD, keys, rights
// and length (no address: ibv_import_mr's is NULL).
type ImportedMR struct {
	PD, LKey, RKey uint32
	Access         ibv.Access
	Len            uint64
}

// QueryMR asks what region mr is.
func (c *Conn) QueryMR(mr uint32) (ImportedMR, error) {
	var r hostif.QueryMRReply
	_, err := c.call(hostif.OpQueryMR, hostif.HandleRequest{Handle: mr}, &r)
	return ImportedMR{PD: r.PD, LKey: r.LKey, RKey: r.RKey, Access: ibv.Access(r.Access), Len: r.Length}, err
}

// ImportDM maps device memory dm again from the memfd the daemon passes,
// and returns it with the length alloc_dm was asked for.
func (c *Conn) ImportDM(dm uint32) (DM, uint64, error) {
	var r hostif.QueryDMReply
	fds, err := c.call(hostif.OpQueryDM, hostif.HandleRequest{Handle: dm}, &r)
	if err != nil {
		return DM{}, 0, err
	}
	page := uint64(os.Getpagesize())
	mem, err := mapRing(fds, int((r.Length+page-1)&^(page-1)))
	if err != nil {
		return DM{}, 0, err
	}
	return DM{Handle: dm, Mem: mem}, r.Length, nil
}
