package daemon

import "github.com/softnic/softnic/hostif"

// Limits bound what one user (a uid, as the control socket reports it)
// can make the daemon hold, so that no user denies service to another.
// A zero field takes its default (DefaultLimits); a negative one means no
// bound. Registered bytes have no field here: they count against each
// client process's own RLIMIT_MEMLOCK, as the kernel counts pinned pages
// (root and CAP_IPC_LOCK exempt).
type Limits struct {
	// Sessions is how many connections a user may hold open at once
	// (sessions and monitors alike); one more is refused with EAGAIN.
	Sessions int
	// The objects of each kind, over all of the user's sessions; one
	// more is refused with ENOMEM.
	PDs, MRs, CQs, QPs, SRQs, AHs, CMIDs int
	// Descriptors is how many of the daemon's file descriptors the user's
	// sessions hold (their sockets, pidfds, memory descriptors, completion
	// and event channels); one more is refused with EMFILE.
	Descriptors int
	// RingBytes is the shared memory the daemon makes for the user's
	// rings (session pages, CQs, QPs, SRQs): the daemon's own memory.
	RingBytes int64
	// SharedBytes is how much of the daemon's address space the user's
	// share_memory mappings take.
	SharedBytes int64
	// DMs and DMBytes bound the user's device memory allocations
	// (ibv_alloc_dm): the device's hostif.MaxDMSize bytes are every
	// user's, so no one user may take them all.
	DMs     int
	DMBytes int64
	// MWs is how many memory windows the user's sessions hold; one more
	// is refused with ENOMEM.
	MWs int
	// McastAttachments is how many (QP, multicast group) attachments the
	// user's QPs hold: the device has room for ibv.MaxMcastGroups groups
	// in all, of which one user takes at most this many.
	McastAttachments int
	// TMTags is how many tagged buffers the user's tag matching SRQs
	// may list, counted at their creation by their max_num_tags (the
	// engine makes room for that many); one SRQ more is refused with
	// ENOMEM.
	TMTags int
	// RawQPs is how many raw packet QPs (which also count as QPs) and
	// Flows how many flows the user's sessions hold: every flow is an
	// entry of the device's table and of its XDP program's rule map
	// (roce.MaxFlows for the whole device), so no one user may take
	// them all.
	RawQPs, Flows int
	// XRCDs is how many XRC domain handles (ibv_open_xrcd) the user's
	// sessions hold open; one more is refused with ENOMEM.
	XRCDs int
}

// DefaultLimits are the bounds a zero Limits field takes: each is far
// above what one program needs (cmtime's 10,000 connections, an MPI
// rank per core) and far below what the daemon has (a million
// descriptors, 128 TiB of address space). Descriptors: rdma_create_qp
// without CQs makes two completion channels a connection (rdma-core's
// ucma_create_cqs: cmtime, rdma_server), each the write end of a pipe
// here, so cmtime -c 10000 holds 20,003.
var DefaultLimits = Limits{
	Sessions:    1024,
	PDs:         16384,
	MRs:         65536,
	CQs:         32768,
	QPs:         32768,
	SRQs:        16384,
	AHs:         65536,
	CMIDs:       32768,
	Descriptors: 65536,
	RingBytes:   2 << 30,
	SharedBytes: 64 << 30,
	DMs:         256,
	DMBytes:     hostif.MaxDMSize / 2,
	MWs:         65536,
	// A quarter of the device's groups: rdma-core's tests and mckey
	// attach one QP to one group.
	McastAttachments: 256,
	// 64 SRQs of the device's largest list.
	TMTags: 64 * hostif.TMMaxNumTags,
	// rdma-core's test_flow: two raw QPs and one flow at a time.
	RawQPs: 64,
	Flows:  16,
	// rdma-core's tests open one a test; ibv_xsrq_pingpong one a side.
	XRCDs: 1024,
}

// descriptorReserve is what DescriptorShare keeps for the daemon itself:
// its listeners, links, logs, and the sessions of every other user.
const descriptorReserve = 1024

// DescriptorShare is the Descriptors bound for a daemon process whose
// descriptor limit is nofile and which serves servers devices: the
// default, or less when that limit is lower, so that no one user holds
// more than half of what the process can open (on a host whose hard
// limit is 20,000: 4,744 per user and device for two devices).
func DescriptorShare(nofile uint64, servers int) int {
	if servers < 1 {
		servers = 1
	}
	free := int64(nofile) - descriptorReserve
	share := free / 2 / int64(servers)
	if nofile > 1<<40 || share >= int64(DefaultLimits.Descriptors) {
		return DefaultLimits.Descriptors
	}
	return int(max(share, 64))
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&l.Sessions, d.Sessions)
	pick(&l.PDs, d.PDs)
	pick(&l.MRs, d.MRs)
	pick(&l.CQs, d.CQs)
	pick(&l.QPs, d.QPs)
	pick(&l.SRQs, d.SRQs)
	pick(&l.AHs, d.AHs)
	pick(&l.CMIDs, d.CMIDs)
	pick(&l.Descriptors, d.Descriptors)
	pick(&l.MWs, d.MWs)
	pick(&l.McastAttachments, d.McastAttachments)
	pick(&l.TMTags, d.TMTags)
	pick(&l.RawQPs, d.RawQPs)
	pick(&l.Flows, d.Flows)
	pick(&l.XRCDs, d.XRCDs)
	if l.RingBytes == 0 {
		l.RingBytes = d.RingBytes
	}
	if l.SharedBytes == 0 {
		l.SharedBytes = d.SharedBytes
	}
	pick(&l.DMs, d.DMs)
	if l.DMBytes == 0 {
		l.DMBytes = d.DMBytes
	}
	return l
}

// Usage is what a user's sessions hold now, in Limits' terms.
type Usage Limits

// Usage returns what user uid's sessions hold of each bounded resource.
func (s *Server) Usage(uid uint32) Usage {
	var h [numResources]int64
	for r := range h {
		h[r] = s.accts.held(uid, resource(r))
	}
	return Usage{Sessions: int(h[resSession]), PDs: int(h[resPD]), MRs: int(h[resMR]), CQs: int(h[resCQ]),
		QPs: int(h[resQP]), SRQs: int(h[resSRQ]), AHs: int(h[resAH]), CMIDs: int(h[resCMID]),
		Descriptors: int(h[resDescriptor]), RingBytes: h[resRingBytes], SharedBytes: h[resSharedBytes],
		DMs: int(h[resDM]), DMBytes: h[resDMBytes], MWs: int(h[resMW]),
		McastAttachments: int(h[resMcast]), TMTags: int(h[resTMTags]), RawQPs: int(h[resRawQP]),
		Flows: int(h[resFlow]), XRCDs: int(h[resXRCD])}
}
