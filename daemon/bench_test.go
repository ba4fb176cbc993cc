package daemon_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// sender is one side of the write benchmark: post a signaled WRITE, poll
// completions.
type sender interface {
	post(wr *ibv.SendWR) error
	poll(wcs []ibv.WC) (int, error)
}

type daemonSender struct{ q *clientQP }

func (s daemonSender) post(wr *ibv.SendWR) error      { return s.q.qp.PostSend(wr) }
func (s daemonSender) poll(wcs []ibv.WC) (int, error) { return s.q.cq.Poll(wcs) }

type localSender struct {
	qp *verbs.QP
	cq *verbs.CQ
}

func (s localSender) post(wr *ibv.SendWR) error      { return s.qp.PostSend(wr) }
func (s localSender) poll(wcs []ibv.WC) (int, error) { return s.cq.Poll(wcs) }

// BenchmarkWrite compares 64 KiB and 64 B WRITEs, 16 in flight, over the
// in-memory link: from a client through the daemon, and from a QP of the
// same device in the process. Compare the two within one run.
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{64 << 10, 64} {
		for _, mode := range []string{"daemon", "in-process"} {
			b.Run(fmt.Sprintf("%s/%dB", mode, size), func(b *testing.B) {
				r := newRig(b)
				var s sender
				var sge ibv.SGE
				if mode == "daemon" {
					q := connectClient(b, r)
					s, sge = daemonSender{q}, q.mr.SGE(0, size)
				} else {
					ls, lsge := localQP(b, r)
					s, sge = ls, lsge
					sge.Length = uint32(size)
				}
				runWrites(b, s, sge, r.pmr)
			})
		}
	}
}

func runWrites(b *testing.B, s sender, sge ibv.SGE, dst *verbs.MR) {
	wr := ibv.SendWR{Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{sge}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	wcs := make([]ibv.WC, 16)
	b.SetBytes(int64(sge.Length))
	b.ReportAllocs()
	inflight, posted, done := 0, 0, 0
	for done < b.N {
		for inflight < 16 && posted < b.N {
			wr.ID = uint64(posted)
			if err := s.post(&wr); err != nil {
				break
			}
			inflight++
			posted++
		}
		n, err := s.poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != ibv.WCSuccess {
				b.Fatalf("completion %d: %v", wc.WRID, wc.Status)
			}
		}
		inflight -= n
		done += n
	}
}

// localQP is a QP of the daemon's device made in this process, connected
// to a second QP of the peer device.
func localQP(b testing.TB, r *rig) (localSender, ibv.SGE) {
	pd := r.a.AllocPD()
	cq, err := r.a.CreateCQ(64, nil)
	require.NoError(b, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(b, err)
	mr, err := pd.RegMR(make([]byte, 1<<16), verbs.AccessLocalWrite)
	require.NoError(b, err)
	pcq, err := r.b.CreateCQ(64, nil)
	require.NoError(b, err)
	peer, err := r.ppd.CreateQP(&verbs.QPInitAttr{SendCQ: pcq, RecvCQ: pcq, Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(b, err)
	gidA, _ := r.a.GID(0)
	gidB, _ := r.b.GID(0)
	toRTS(b, qp.Modify, peer.QPN(), gidB)
	toRTS(b, peer.Modify, qp.QPN(), gidA)
	return localSender{qp: qp, cq: cq}, mr.SGE(0, 1<<16)
}
