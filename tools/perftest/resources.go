package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/cpupin"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// Device is the RDMA side of a run: an opened verbs device and what
// perftest would query from its port.
type Device struct {
	Verbs *verbs.Device
	// Name is printed as perftest's "Device" (softnic: the interface).
	Name string
	// LinkMTU is the L3 MTU of the link; the port's active MTU is the
	// largest IB MTU whose packets fit it.
	LinkMTU int
	// Resolve, if set, learns the link-layer address of a peer before a QP
	// is aimed at it (neighbour resolution on real interfaces).
	Resolve func(peer netip.Addr) error
}

// ActiveMTU returns the largest IB path MTU (256..4096) whose packets fit
// a link of L3 MTU linkMTU: IP (20 or 40), UDP 8, BTH 12, RETH 16, ImmDt 4,
// ICRC 4 bytes of headers. 0 if none fits.
func ActiveMTU(linkMTU int, ipv6 bool) int {
	over := 20 + 8 + 12 + 16 + 4 + 4
	if ipv6 {
		over += 20
	}
	best := 0
	for e := 1; e <= 5; e++ {
		if oob.MTUBytes(e)+over <= linkMTU {
			best = oob.MTUBytes(e)
		}
	}
	return best
}

// inc is perftest's INC: the stride of consecutive messages in a buffer,
// at least a cache line.
func inc(size uint64, cacheLine uint64) uint64 {
	if size > cacheLine {
		return uint64(roundUp(int(size), int(cacheLine)))
	}
	return cacheLine
}

// buffSize is perftest's BUFF_SIZE: the per-QP area, at least a cycle buffer.
func buffSize(size, cycle uint64) uint64 {
	if size < cycle {
		return cycle
	}
	return size
}

// context of one run: perftest's struct pingpong_context.
type runCtx struct {
	p         *Params
	dev       Device
	pd        *verbs.PD
	mr        *verbs.MR
	buf       []byte // the registered memory, from AllocMemory
	scq, rcq  *verbs.CQ
	qps       []*verbs.QP
	local     []oob.PerftestDest
	remote    []oob.PerftestDest
	cycle     uint64
	cacheLine uint64
	area      uint64 // BUFF_SIZE of the allocation size
	gid       verbs.GID
	mtu       verbs.MTU // the path MTU both sides agreed on
	sizes     []uint64  // the message size of each round
	out       io.Writer // where the run prints perftest's report
	ctx       context.Context
	// progress counts completions; the stall watchdog reads it.
	progress atomic.Uint64
	// pin keeps a latency or bandwidth loop's thread on its QP's engine
	// CPU (startPin).
	pin *cpupin.Pin
}

func (r *runCtx) access() verbs.Access {
	a := verbs.AccessLocalWrite
	switch r.p.Verb() {
	case VerbWrite, VerbSend:
		a |= verbs.AccessRemoteWrite
	case VerbRead:
		a |= verbs.AccessRemoteRead
	case VerbAtomic:
		a |= verbs.AccessRemoteAtomic
	}
	return a
}

// allocate allocates the buffer and CQs (alloc_ctx and ctx_init up to
// the QPs), on the device of the run.
func (r *runCtx) allocate() error {
	p := r.p
	gid, err := r.dev.Verbs.GID(p.GIDIndex)
	if err != nil {
		return fmt.Errorf("GID index %d: %w", p.GIDIndex, err)
	}
	r.gid = gid
	r.area = buffSize(p.Size, r.cycle)
	total := inc(r.area, r.cacheLine) * 2 * uint64(p.NumQPs)
	r.pd = r.dev.Verbs.AllocPD()
	// Memory the daemon maps too, when the device is reached through one:
	// it then copies payloads as an in-process device does.
	buf, err := r.dev.Verbs.AllocMemory(int(total))
	if err != nil {
		return fmt.Errorf("allocate %d bytes: %w", total, err)
	}
	r.buf = buf
	if p.Test.IsBW() || p.Verb() != VerbWrite {
		fillRandom(buf)
	}
	if r.mr, err = r.pd.RegMR(buf, r.access()); err != nil {
		return fmt.Errorf("register %d bytes: %w", total, err)
	}
	if r.scq, err = r.dev.Verbs.CreateCQ(p.NumQPs*p.TxDepth+16, nil); err != nil {
		return fmt.Errorf("create send CQ: %w", err)
	}
	if p.Duplex && p.Verb() == VerbSend {
		// run_iter_bi waits on sends and receives at once: one CQ for both
		// lets it block on a single queue.
		if r.scq, err = r.dev.Verbs.CreateCQ(p.NumQPs*(p.TxDepth+p.RxDepth)+16, nil); err != nil {
			return fmt.Errorf("create CQ: %w", err)
		}
		r.rcq = r.scq
	} else if r.rcq, err = r.dev.Verbs.CreateCQ(p.NumQPs*p.RxDepth+16, nil); err != nil {
		return fmt.Errorf("create receive CQ: %w", err)
	}
	return nil
}

// qpInitAttr is the creation attributes of the test QPs
// (create_qp_main), whoever creates them.
func (r *runCtx) qpInitAttr() *verbs.QPInitAttr {
	p := r.p
	return &verbs.QPInitAttr{SendCQ: r.scq, RecvCQ: r.rcq, Cap: verbs.QPCap{
		MaxSendWR: p.TxDepth, MaxRecvWR: p.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: p.InlineSize}}
}

// createQPs creates the test QPs and moves them to INIT (the rest of
// ctx_init without -R).
func (r *runCtx) createQPs() error {
	for i := 0; i < r.p.NumQPs; i++ {
		qp, err := r.pd.CreateQP(r.qpInitAttr())
		if err != nil {
			return fmt.Errorf("create QP: %w", err)
		}
		r.qps = append(r.qps, qp)
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: r.access(), Port: 1},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex); err != nil {
			return fmt.Errorf("QP to INIT: %w", err)
		}
	}
	return nil
}

// setUpConnection fills the local keys of each QP (set_up_connection).
// With -R the PSN is random as perftest's, though rdma_cm chose the QP's
// real starting PSN; nobody uses it then.
func (r *runCtx) setUpConnection() {
	p := r.p
	for i, qp := range r.qps {
		r.local = append(r.local, oob.PerftestDest{
			OutReads: uint16(p.OutReads),
			QPN:      qp.QPN(),
			PSN:      rand.Uint32() & 0xffffff,
			RKey:     r.mr.RKey(),
			VAddr:    r.mr.Addr() + uint64(p.NumQPs+i)*r.area,
			GID:      r.gid,
		})
	}
}

func (r *runCtx) close() {
	for _, qp := range r.qps {
		qp.Destroy()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.buf != nil {
		r.dev.Verbs.FreeMemory(r.buf)
	}
}

// ErrGIDTypes is perftest's "Found Incompatibility issue with GID types":
// one side IPv4, the other IPv6.
var ErrGIDTypes = errors.New("perftest: GID types differ (IPv4 and IPv6); use the same IP version on both sides")

// connect moves the QPs to RTR and RTS aimed at the peer's QPs
// (ctx_connect, ctx_modify_qp_to_rtr/rts in perftest_resources.c).
func (r *runCtx) connect(remote []oob.PerftestDest, mtu verbs.MTU) error {
	r.remote = remote
	if netip.AddrFrom16(remote[0].GID).Unmap().Is4() != netip.AddrFrom16(r.gid).Unmap().Is4() {
		return ErrGIDTypes
	}
	for i, qp := range r.qps {
		rem := remote[i]
		peer := netip.AddrFrom16(rem.GID).Unmap()
		if r.dev.Resolve != nil {
			if err := r.dev.Resolve(peer); err != nil {
				return fmt.Errorf("resolve %v: %w", peer, err)
			}
		}
		rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: rem.QPN, RQPSN: verbs.PSN(rem.PSN),
			MinRNRTimer: 12, MaxDestRdAtomic: uint8(min(max(r.p.OutReads, 1), ibv.MaxRdAtomic)),
			AV: verbs.AddressVector{DGID: rem.GID, SGIDIndex: uint8(r.p.GIDIndex), HopLimit: 0xff, TrafficClass: r.p.TrafficClass}}
		if err := qp.Modify(rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
			verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			return fmt.Errorf("QP %#x to RTR: %w", qp.QPN(), err)
		}
		rts := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: verbs.PSN(r.local[i].PSN), Timeout: r.p.QPTimeout, RetryCnt: 7, RNRRetry: 7,
			MaxRdAtomic: uint8(min(max(int(rem.OutReads), 1), ibv.MaxRdAtomic))}
		if err := qp.Modify(rts, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("QP %#x to RTS: %w", qp.QPN(), err)
		}
	}
	return nil
}

// pageSize is what perftest sends as its cycle buffer (sysconf(_SC_PAGESIZE)).
func pageSize() uint32 { return uint32(os.Getpagesize()) }

// BestGIDIndex is perftest's get_best_gid_index for a device whose GIDs
// are all RoCE v2 (softnic's): the first IPv4-mapped GID, or with ipv6 the
// first other one; index 0 when the table has none of the wanted kind.
func BestGIDIndex(gids []verbs.GID, ipv6 bool) int {
	best := 0
	for i := 1; i < len(gids); i++ {
		cur := netip.AddrFrom16(gids[best]).Is4In6()
		rival := netip.AddrFrom16(gids[i]).Is4In6()
		if (rival && !cur && !ipv6) || (!rival && cur && ipv6) {
			best = i
		}
	}
	return best
}

// fillRandom fills buf with pseudo-random words, as perftest's
// initialize_buffer_content does for every test but write_lat (which
// zeroes). Besides fidelity it matters for the figures: a buffer never
// written maps the kernel's shared zero page, and a sender reading 1024
// QPs' areas would then read one cache-hot page.
func fillRandom(buf []byte) {
	x := uint32(time.Now().UnixNano()) | 1
	for len(buf) >= 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		binary.LittleEndian.PutUint32(buf, x)
		buf = buf[4:]
	}
}
