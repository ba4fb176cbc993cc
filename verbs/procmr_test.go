package verbs_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/procmem"
	"github.com/softnic/softnic/internal/procmem/memchild"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// Some tests reach into another process, as the daemon does into its
// clients: this test binary run again (memchild).
func TestMain(m *testing.M) {
	if memchild.Serve() {
		return
	}
	os.Exit(m.Run())
}

// A region in another process's memory serves every operation, both as the
// target of a peer's requests and in local work requests, and stops
// serving when the process is gone.
func TestProcessMemoryRegion(t *testing.T) {
	o := defaultOpts()
	_, x, y := connectedPair(t, memlink.Config{}, o)
	lmr, lbuf := regMR(t, x.pd, 64<<10, allAccess)
	fill(lbuf, 1)

	child := memchild.Start(t)
	mem, err := procmem.Open(child.Pid())
	require.NoError(t, err)
	defer mem.Close()
	require.NoError(t, mem.CheckMapped(child.Buf, 64<<10, true))
	rmr, err := y.pd.RegProcessMemory(mem, child.Buf, 64<<10, allAccess)
	require.NoError(t, err)
	require.Equal(t, child.Buf, rmr.Addr())
	require.Equal(t, 64<<10, rmr.Len())
	require.Nil(t, rmr.Bytes())

	post := func(wr verbs.SendWR) verbs.WC {
		wr.Flags |= verbs.SendSignaled
		require.NoError(t, x.qp.PostSend(&wr))
		return waitWC(t, x.scq)
	}
	// WRITE: five packets land in the child.
	wc := post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(0, 5000)}, RemoteAddr: rmr.Addr() + 100, RKey: rmr.RKey()})
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, lbuf[:5000], child.Bytes(t, 100, 5000))
	require.EqualValues(t, 1, rmr.RemoteWriteSeq())

	// READ: what the child wrote comes back.
	child.Fill(t, 8192, 3000, 9)
	wc = post(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{lmr.SGE(20000, 3000)}, RemoteAddr: rmr.Addr() + 8192, RKey: rmr.RKey()})
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, child.Bytes(t, 8192, 3000), lbuf[20000:23000])

	// Atomics on the child's word.
	wc = post(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendInline, InlineData: make([]byte, 8), RemoteAddr: rmr.Addr() + 16384, RKey: rmr.RKey()})
	require.Equal(t, verbs.WCSuccess, wc.Status)
	wc = post(verbs.SendWR{ID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SGL: []verbs.SGE{lmr.SGE(30000, 8)}, RemoteAddr: rmr.Addr() + 16384, RKey: rmr.RKey(), CompareAdd: 5})
	require.Equal(t, verbs.WCSuccess, wc.Status)
	wc = post(verbs.SendWR{ID: 5, Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{lmr.SGE(30008, 8)}, RemoteAddr: rmr.Addr() + 16384, RKey: rmr.RKey(), CompareAdd: 5, Swap: 77})
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}, lbuf[30000:30016], "the original values")
	require.Equal(t, []byte{77, 0, 0, 0, 0, 0, 0, 0}, child.Bytes(t, 16384, 8))

	// The child's memory in local work requests: a receive scattered into
	// it, a send gathered from it.
	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 6, SGL: []verbs.SGE{rmr.SGE(40000, 1000), rmr.SGE(50000, 1000)}}))
	wc = post(verbs.SendWR{ID: 7, Opcode: verbs.WRSend, SGL: []verbs.SGE{lmr.SGE(1000, 1500)}})
	require.Equal(t, verbs.WCSuccess, wc.Status)
	waitOK(t, y.rcq, 6)
	require.Equal(t, lbuf[1000:2000], child.Bytes(t, 40000, 1000))
	require.Equal(t, lbuf[2000:2500], child.Bytes(t, 50000, 500))
	require.NoError(t, x.qp.PostRecv(&verbs.RecvWR{ID: 8, SGL: []verbs.SGE{lmr.SGE(60000, 2000)}}))
	require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{rmr.SGE(8192, 2000)}}))
	waitOK(t, y.scq, 9)
	waitOK(t, x.rcq, 8)
	require.Equal(t, child.Bytes(t, 8192, 2000), lbuf[60000:62000])

	// Gone: the peer's WRITE is refused with a remote access error.
	child.Kill()
	wc = post(verbs.SendWR{ID: 10, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(0, 100)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	require.Equal(t, verbs.WCRemAccessErr, wc.Status)
}

func TestRegProcessMemoryChecks(t *testing.T) {
	p := newPair(t, memlink.Config{})
	pd := p.a.AllocPD()
	child := memchild.Start(t)
	mem, err := procmem.Open(child.Pid())
	require.NoError(t, err)
	defer mem.Close()
	_, err = pd.RegProcessMemory(mem, child.Buf, 100, verbs.AccessRemoteWrite)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument, "remote write without local write")
	_, err = pd.RegProcessMemory(mem, ^uint64(0)-10, 100, verbs.AccessLocalWrite)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument, "a range that wraps")
	_, err = pd.RegProcessMemory(nil, child.Buf, 100, verbs.AccessLocalWrite)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
}
