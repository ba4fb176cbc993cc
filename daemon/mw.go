package daemon

import (
	"fmt"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/verbs"
)

// hostMW is a session's memory window. Its binds come through the send
// queue (BIND_MW entries), which name it by its rkey's key index, as a
// ConnectX WQE names its window: the engine finds it there and checks
// that the window is in the posting QP's PD, so a session binds only its
// own.
type hostMW struct {
	mw *verbs.MW
	pd uint32
}

// allocMW allocates a memory window (ibv_alloc_mw): type 1 or 2 (EINVAL
// for another, as an unknown type is the caller's error, not a missing
// feature).
func (ss *session) allocMW(req hostif.AllocMWRequest) (any, error) {
	pd := ss.pds[req.PD]
	if pd == nil {
		return nil, fmt.Errorf("PD %d: %w", req.PD, errNoObject)
	}
	if req.Type != uint32(verbs.MWType1) && req.Type != uint32(verbs.MWType2) {
		return nil, fmt.Errorf("memory window type %d: %w", req.Type, verbs.ErrInvalidArgument)
	}
	if err := ss.take(resMW, 1); err != nil {
		return nil, err
	}
	mw, err := pd.AllocMW(verbs.MWType(req.Type))
	if err != nil {
		ss.give(resMW, 1)
		return nil, err
	}
	h := ss.handle()
	ss.mws[h] = &hostMW{mw: mw, pd: req.PD}
	return hostif.AllocMWReply{Handle: h, RKey: mw.RKey()}, nil
}

// deallocMW deallocates a window, bound or not (rxe unbinds it).
func (ss *session) deallocMW(req hostif.HandleRequest) error {
	w := ss.mws[req.Handle]
	if w == nil {
		return errNoObject
	}
	if err := w.mw.Dealloc(); err != nil {
		return err
	}
	delete(ss.mws, req.Handle)
	ss.give(resMW, 1)
	return nil
}
