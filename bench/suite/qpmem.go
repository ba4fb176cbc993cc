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
	la, lb := memlink.Pair(memlink.Config{})
	defer la.Close()
	defer lb.Close()
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	if err != nil {
		return qpMemResult{}, err
	}
	defer a.Close()
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}})
	if err != nil {
		return qpMemResult{}, err
	}
	defer b.Close()
	sa, err := newQPSide(a, n, sendWR)
	if err != nil {
		return qpMemResult{}, fmt.Errorf("device A: %w", err)
	}
	sb, err := newQPSide(b, n, sendWR)
	if err != nil {
		return qpMemResult{}, fmt.Errorf("device B: %w", err)
	}

	before := liveMemory()
	if err := connectIdleQPs(sa, sb, n, sendWR); err != nil {
		return qpMemResult{}, err
	}
	r := memoryPerQP(before, liveMemory(), 2*n)
	if profile != "" {
		if err := writeHeapProfile(profile); err != nil {
			return r, err
		}
	}
	for _, s := range []*qpSide{sa, sb} {
		for _, qp := range s.qps {
			qp.Destroy()
		}
	}
	runtime.KeepAlive(sa)
	runtime.KeepAlive(sb)
	return r, nil
}

// qpSide is one device's half of the idle QPs, sharing one send and one
// receive CQ as perftest's do.
type qpSide struct {
	dev      *verbs.Device
	pd       *verbs.PD
	scq, rcq *verbs.CQ
	gid      verbs.GID
	qps      []*verbs.QP
}

// newQPSide makes the PD and CQs of n QPs of sendWR send WRs on d.
func newQPSide(d *verbs.Device, n, sendWR int) (*qpSide, error) {
	s := &qpSide{dev: d, pd: d.AllocPD()}
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

// connectIdleQPs creates n QPs on each side and connects QP i of one to QP
// i of the other (INIT, RTR, RTS, as perftest does).
func connectIdleQPs(sa, sb *qpSide, n, sendWR int) error {
	for _, s := range []*qpSide{sa, sb} {
		for range n {
			qp, err := s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: verbs.QPCap{
				MaxSendWR: sendWR, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return fmt.Errorf("create QP %d: %w", len(s.qps), err)
			}
			s.qps = append(s.qps, qp)
		}
	}
	for i := range n {
		for _, pair := range [][2]*qpSide{{sa, sb}, {sb, sa}} {
			if err := connectQP(pair[0].qps[i], pair[1].qps[i].QPN(), pair[1].gid); err != nil {
				return fmt.Errorf("QP %d %w", i, err)
			}
		}
	}
	return nil
}

// connectQP moves qp through INIT and RTR to RTS towards QP peerQPN at
// peerGID.
func connectQP(qp *verbs.QP, peerQPN uint32, peerGID verbs.GID) error {
	const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: access, Port: 1},
		verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex); err != nil {
		return fmt.Errorf("to INIT: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU4096, DestQPN: peerQPN,
		RQPSN: 0, MaxDestRdAtomic: 16, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: peerGID, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("to RTR: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("to RTS: %w", err)
	}
	return nil
}

// memoryPerQP divides the growth from before to after by qps.
func memoryPerQP(before, after memSnapshot, qps int) qpMemResult {
	total := float64(qps)
	r := qpMemResult{
		QPs:             qps,
		HeapPerQP:       float64(int64(after.heap)-int64(before.heap)) / total,
		StackPerQP:      float64(int64(after.stack)-int64(before.stack)) / total,
		GoroutinesPerQP: float64(after.goroutines-before.goroutines) / total,
	}
	r.BytesPerQP = r.HeapPerQP + r.StackPerQP
	return r
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
