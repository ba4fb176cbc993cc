package main

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// qpMemResult is the memory idle connected QPs cost.
type qpMemResult struct {
	QPs             int     // QPs measured (both ends together)
	BytesPerQP      float64 // heap and goroutine stacks
	HeapPerQP       float64
	StackPerQP      float64
	GoroutinesPerQP float64
}

// qpMemory creates n connected RC QP pairs between two devices joined by an
// in-memory link, sized like perftest write_bw's (send queue sendWR,
// perftest's 128 by default; receive queue 1, one SGE, no inline data) and sharing their device's CQs as
// perftest's do, and divides the growth of the live heap and goroutine
// stacks by the 2n QPs. Nothing moves on them: this is the cost of an
// idle connection.
//
// With profile set it writes a heap profile there while the QPs live
// (`go tool pprof -sample_index=inuse_space -top`): what an idle QP holds.
func qpMemory(n, sendWR int, profile string) (qpMemResult, error) {
	if profile != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 64
		defer func() { runtime.MemProfileRate = old }()
	}
	addrA, addrB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	la, lb := memlink.Pair(memlink.Config{})
	defer la.Close()
	defer lb.Close()
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	if err != nil {
		return qpMemResult{}, err
	}
	defer a.Close()
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{addrB}})
	if err != nil {
		return qpMemResult{}, err
	}
	defer b.Close()
	type side struct {
		dev      *verbs.Device
		pd       *verbs.PD
		scq, rcq *verbs.CQ
		gid      verbs.GID
		qps      []*verbs.QP
	}
	mk := func(d *verbs.Device) (*side, error) {
		s := &side{dev: d, pd: d.AllocPD()}
		var err error
		if s.scq, err = d.CreateCQ(n*sendWR+16, nil); err != nil {
			return nil, err
		}
		if s.rcq, err = d.CreateCQ(n+16, nil); err != nil {
			return nil, err
		}
		s.gid, err = d.GID(0)
		return s, err
	}
	sa, err := mk(a)
	if err != nil {
		return qpMemResult{}, fmt.Errorf("device A: %w", err)
	}
	sb, err := mk(b)
	if err != nil {
		return qpMemResult{}, fmt.Errorf("device B: %w", err)
	}

	before := liveMemory()
	for _, s := range []*side{sa, sb} {
		for range n {
			qp, err := s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: verbs.QPCap{
				MaxSendWR: sendWR, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return qpMemResult{}, fmt.Errorf("create QP %d: %w", len(s.qps), err)
			}
			s.qps = append(s.qps, qp)
		}
	}
	const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	for i := range n {
		for _, pair := range [][2]*side{{sa, sb}, {sb, sa}} {
			me, peer := pair[0], pair[1]
			qp := me.qps[i]
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: access, Port: 1},
				verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex); err != nil {
				return qpMemResult{}, fmt.Errorf("QP %d to INIT: %w", i, err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU4096, DestQPN: peer.qps[i].QPN(),
				RQPSN: 0, MaxDestRdAtomic: 16, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: peer.gid, HopLimit: 64}},
				verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
					verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
				return qpMemResult{}, fmt.Errorf("QP %d to RTR: %w", i, err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
					verbs.QPAttrMaxQPRdAtomic); err != nil {
				return qpMemResult{}, fmt.Errorf("QP %d to RTS: %w", i, err)
			}
		}
	}
	after := liveMemory()
	total := float64(2 * n)
	r := qpMemResult{
		QPs:             2 * n,
		HeapPerQP:       float64(int64(after.heap)-int64(before.heap)) / total,
		StackPerQP:      float64(int64(after.stack)-int64(before.stack)) / total,
		GoroutinesPerQP: float64(after.goroutines-before.goroutines) / total,
	}
	r.BytesPerQP = r.HeapPerQP + r.StackPerQP
	if profile != "" {
		if err := writeHeapProfile(profile); err != nil {
			return r, err
		}
	}
	for _, s := range []*side{sa, sb} {
		for _, qp := range s.qps {
			qp.Destroy()
		}
	}
	runtime.KeepAlive(sa)
	runtime.KeepAlive(sb)
	return r, nil
}

type memSnapshot struct {
	heap, stack uint64
	goroutines  int
}

// liveMemory collects garbage twice (finalizers may free more) and reads
// the live heap and the goroutine stacks.
func liveMemory() memSnapshot {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSnapshot{heap: m.HeapAlloc, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}
