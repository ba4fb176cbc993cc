package verbs

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// Tag matching (ConnectX's TM SRQs, in libibverbs' generic API): names of
// package ibv's.
type (
	TMCaps    = ibv.TMCaps
	OpsWR     = ibv.OpsWR
	OpsOpcode = ibv.OpsOpcode
	OpsFlags  = ibv.OpsFlags
)

// Tag matching's list operations, flags, completions and statuses.
const (
	OpsTagAdd   = ibv.OpsTagAdd
	OpsTagDel   = ibv.OpsTagDel
	OpsTagSync  = ibv.OpsTagSync
	OpsSignaled = ibv.OpsSignaled
	OpsTMSync   = ibv.OpsTMSync

	WCTMAdd   = ibv.WCTMAdd
	WCTMDel   = ibv.WCTMDel
	WCTMSync  = ibv.WCTMSync
	WCTMRecv  = ibv.WCTMRecv
	WCTMNoTag = ibv.WCTMNoTag

	WCTMSyncReq   = ibv.WCTMSyncReq
	WCTMMatch     = ibv.WCTMMatch
	WCTMDataValid = ibv.WCTMDataValid

	WCTMErr            = ibv.WCTMErr
	WCTMRndvIncomplete = ibv.WCTMRndvIncomplete

	TMCapRC = ibv.TMCapRC
)

// TMSRQInit describes a tag matching SRQ (ibv_create_srq_ex with
// IBV_SRQT_TM): its ordinary receives, its CQ, which takes its list
// operations' completions and its QPs' receive completions, and its
// matching list's size and outstanding operations (ibv_tm_cap).
type TMSRQInit struct {
	MaxWR, MaxSGE int
	CQ            *CQ
	MaxNumTags    int
	MaxOps        int
}

// NewTMSRQ creates a tag matching SRQ. Its RC QPs match the TM header of
// each SEND they receive against its list of tagged buffers (PostOps);
// a message that matches none goes to an ordinary receive.
func (pd *PD) NewTMSRQ(init TMSRQInit) (*SRQ, error) {
	if init.MaxWR <= 0 || init.MaxSGE <= 0 || init.MaxWR > 1<<16 || init.MaxSGE > 256 || init.CQ == nil ||
		init.MaxNumTags <= 0 || init.MaxNumTags > ibv.MaxTMTags || init.MaxOps <= 0 || init.MaxOps > ibv.MaxTMOps {
		return nil, fmt.Errorf("create TM SRQ %+v: %w", init, ErrInvalidArgument)
	}
	if init.CQ.dev != pd.dev {
		return nil, fmt.Errorf("create TM SRQ: a CQ of another device: %w", ErrInvalidArgument)
	}
	s := &SRQ{pd: pd, tm: true}
	ops, err := pd.ops.CreateTMSRQ(s, init)
	if err != nil {
		return nil, err
	}
	s.ops = ops
	return s, nil
}

// PostOps performs a list operation on a tag matching SRQ
// (ibv_post_srq_ops): ADD returns the new entry's handle, which DEL
// names. A signaled operation completes into the SRQ's CQ (WCTMAdd,
// WCTMDel, WCTMSync, with WCTMSyncReq when the count the operation
// carried is not the SRQ's count of unexpected messages); a DEL of an
// entry a message took completes with WCTMErr.
func (s *SRQ) PostOps(wr *OpsWR) (handle uint32, err error) {
	if !s.tm {
		return 0, fmt.Errorf("post SRQ ops: not a tag matching SRQ: %w", ErrInvalidArgument)
	}
	if wr.Opcode > OpsTagSync || wr.Flags&^(OpsSignaled|OpsTMSync) != 0 {
		return 0, fmt.Errorf("post SRQ ops: opcode %d, flags %#x: %w", wr.Opcode, wr.Flags, ErrInvalidArgument)
	}
	if wr.Opcode == OpsTagAdd && len(wr.SGL) > ibv.MaxTMSGE {
		return 0, fmt.Errorf("post SRQ ops: %d SGEs, at most %d: %w", len(wr.SGL), ibv.MaxTMSGE, ErrInvalidArgument)
	}
	return s.ops.PostOps(wr)
}

// IsTM reports whether s is a tag matching SRQ.
func (s *SRQ) IsTM() bool { return s.tm }
