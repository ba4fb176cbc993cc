package verbs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/procmem"
	"github.com/softnic/softnic/internal/procmem/memchild"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// countingMemory counts the batched reads the engines make of a process's
// memory.
type countingMemory struct {
	*procmem.Process
	calls, reads   atomic.Int64
	wcalls, writes atomic.Int64
}

func (m *countingMemory) WriteVec(pieces []ibv.Piece) error {
	m.wcalls.Add(1)
	m.writes.Add(int64(len(pieces)))
	return m.Process.WriteVec(pieces)
}

func (m *countingMemory) ReadVec(pieces []ibv.Piece) error {
	m.calls.Add(1)
	m.reads.Add(int64(len(pieces)))
	return m.Process.ReadVec(pieces)
}

// The packets of a message sent from another process's memory take their
// payloads in batches, in order, and those received into it are placed in
// batches; once that process is gone, nothing read from it leaves, and the
// QP that was sending fails instead.
func TestProcessMemoryPayloadsInBatches(t *testing.T) {
	o := defaultOpts()
	_, x, y := connectedPair(t, memlink.Config{}, o)
	child := memchild.Start(t)
	proc, err := procmem.Open(child.Pid())
	require.NoError(t, err)
	defer proc.Close()
	mem := &countingMemory{Process: proc}
	smr, err := x.pd.RegProcessMemory(mem, child.Buf, 64<<10, allAccess)
	require.NoError(t, err)
	child.Fill(t, 0, 64<<10, 5)
	dmr, dbuf := regMR(t, y.pd, 64<<10, allAccess)

	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 64<<10)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey()}))
	waitOK(t, x.scq, 1)
	require.Equal(t, child.Bytes(t, 0, 64<<10), dbuf)
	t.Logf("64 packets read in %d calls", mem.calls.Load())
	require.EqualValues(t, 64, mem.reads.Load(), "one read a packet")
	require.Less(t, mem.calls.Load(), int64(32), "the reads come in batches")

	// The other way: the peer's WRITE lands in the child in batches.
	fill(dbuf, 8)
	require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{dmr.SGE(0, 64<<10)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}))
	waitOK(t, y.scq, 4)
	require.Equal(t, dbuf, child.Bytes(t, 0, 64<<10))
	t.Logf("64 packets placed in %d calls", mem.wcalls.Load())
	require.EqualValues(t, 64, mem.writes.Load(), "one write a packet")
	require.Less(t, mem.wcalls.Load(), int64(32), "the writes come in batches")

	// The peer's receive must stay empty: nothing of a gone process's
	// memory (or in its place) is sent.
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 2, SGL: []verbs.SGE{dmr.SGE(0, 64<<10)}}))
	child.Kill()
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 4096)}}))
	wc := waitWC(t, x.scq)
	require.Equal(t, uint64(3), wc.WRID)
	require.NotEqual(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, verbs.QPSErr, x.qp.State())
	// Had a packet left, the peer would complete the receive at once.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var rwc [1]verbs.WC
	n, err := y.rcq.Wait(ctx, rwc[:])
	require.ErrorIs(t, err, context.DeadlineExceeded, "the peer received %d: %+v", n, rwc[0])
}
