package daemon

import (
	"fmt"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// A context that libibverbs' ibv_import_device made of another one's
// command descriptor is the same session in the provider (the kernel's
// imported context is the same uverbs file), so its handles are this
// session's already. What it still lacks is what the program's objects
// know of themselves: ibv_import_pd, ibv_import_mr and ibv_import_dm
// ask for it by handle. Each answers for the session's own objects only
// (handles are per session) and holds nothing new, so there is nothing
// more to bound; a DM's memfd is the one the session's allocation keeps.

// queryPD says whether the session has PD req.Handle.
func (ss *session) queryPD(req hostif.HandleRequest) error {
	if ss.pds[req.Handle] == nil {
		return fmt.Errorf("PD %d: %w", req.Handle, errNoObject)
	}
	return nil
}

// queryMR gives region req.Handle's PD, keys, rights and length, as the
// kernel's QUERY_MR gives the keys and length.
func (ss *session) queryMR(req hostif.HandleRequest) (any, error) {
	m := ss.mrs[req.Handle]
	if m == nil {
		return nil, fmt.Errorf("MR %d: %w", req.Handle, errNoObject)
	}
	access := m.mr.Access()
	if _, inDM := ss.dm.mrDM[req.Handle]; inDM {
		access |= verbs.AccessZeroBased // registered so, and kept without it (regDMMR)
	}
	return hostif.QueryMRReply{PD: ss.mrPD[req.Handle], LKey: m.mr.LKey(), RKey: m.mr.RKey(),
		Access: uint32(access), Length: uint64(m.mr.Len())}, nil
}

// queryDM gives allocation req.Handle's length and passes its memfd again,
// for the importing context to map.
func (ss *session) queryDM(req hostif.HandleRequest) (any, []int, error) {
	dm := ss.dm.dms[req.Handle]
	if dm == nil {
		return nil, nil, fmt.Errorf("DM %d: %w", req.Handle, errNoObject)
	}
	return hostif.QueryDMReply{Length: dm.length}, []int{dm.fd}, nil
}
