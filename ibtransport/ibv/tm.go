package ibv

// Tag matching's limits (ibv_tm_caps), which the C provider reports too
// (hostif.h's SN_TM_*): tagged buffers in a TM SRQ's list, list
// operations outstanding, SGEs in a tagged buffer (ConnectX's one), and
// the largest rendezvous request (ConnectX's 64 bytes).
const (
	MaxTMTags        = 1023
	MaxTMOps         = 1024
	MaxTMSGE         = 1
	MaxTMRndvHdrSize = 64
)

// TMCapRC is the tm_caps flag for tag matching on RC QPs (IBV_TM_CAP_RC).
const TMCapRC = 1 << 0

// TMCaps are a device's tag matching capabilities (ibv_tm_caps).
type TMCaps struct {
	MaxRndvHdrSize int
	MaxNumTags     int
	Flags          uint32
	MaxOps         int
	MaxSGE         int
}

// DeviceTMCaps are softnic's.
var DeviceTMCaps = TMCaps{MaxRndvHdrSize: MaxTMRndvHdrSize, MaxNumTags: MaxTMTags, Flags: TMCapRC, MaxOps: MaxTMOps, MaxSGE: MaxTMSGE}

// OpsOpcode is a TM SRQ list operation (ibv_ops_wr_opcode).
type OpsOpcode uint8

// List operations, with libibverbs' values.
const (
	OpsTagAdd  OpsOpcode = 0
	OpsTagDel  OpsOpcode = 1
	OpsTagSync OpsOpcode = 2
)

// OpsFlags qualify a list operation (ibv_ops_flags).
type OpsFlags uint8

// List operation flags, with libibverbs' values.
const (
	OpsSignaled OpsFlags = 1 << 0 // complete into the SRQ's CQ
	OpsTMSync   OpsFlags = 1 << 1 // UnexpectedCnt reports what the program has seen
)

// OpsWR is a TM SRQ list operation (ibv_ops_wr): ADD a tagged buffer,
// DEL one by its handle, or SYNC the unexpected message count.
type OpsWR struct {
	ID            uint64
	Opcode        OpsOpcode
	Flags         OpsFlags
	UnexpectedCnt uint32
	Handle        uint32 // DEL's
	// ADD's: the buffer's receive ID, SGL, and the tag and mask a
	// message's tag matches when (msgTag & Mask) == (Tag & Mask).
	RecvID uint64
	SGL    []SGE
	Tag    uint64
	Mask   uint64
}
