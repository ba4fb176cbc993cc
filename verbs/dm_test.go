package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

const dmAccess = verbs.AccessZeroBased | verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead

// TestDMAllocAndCopy checks ibv_alloc_dm's limits and the copies' checks
// (ConnectX's: within the allocation, in 4-byte words), in both backends.
func TestDMAllocAndCopy(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		max := p.a.Query().MaxDMSize
		require.Equal(t, uint64(verbs.MaxDMSize), max)
		for _, bad := range []struct {
			n     uint64
			align int
		}{{0, 0}, {max + 1, 0}, {64, verbs.DMMaxLogAlign + 1}, {64, -1}} {
			_, err := p.a.AllocDM(bad.n, bad.align)
			require.ErrorIs(t, err, verbs.ErrInvalidArgument, "%d bytes, 2^%d", bad.n, bad.align)
		}
		dm, err := p.a.AllocDM(100, 6)
		require.NoError(t, err)
		require.Equal(t, uint64(100), dm.Len())
		src := make([]byte, 96)
		fill(src, 3)
		require.NoError(t, dm.CopyTo(4, src))
		got := make([]byte, 96)
		require.NoError(t, dm.CopyFrom(got, 4))
		require.Equal(t, src, got)
		for _, c := range []struct {
			off uint64
			n   int
		}{{3, 4}, {4, 3}, {104, 4}, {0, 104}, {1 << 63, 4}} {
			require.ErrorIs(t, dm.CopyTo(c.off, make([]byte, c.n)), verbs.ErrInvalidArgument, "%+v", c)
			require.ErrorIs(t, dm.CopyFrom(make([]byte, c.n), c.off), verbs.ErrInvalidArgument, "%+v", c)
		}
		require.NoError(t, dm.Free())
		require.ErrorIs(t, dm.Free(), verbs.ErrInvalidArgument)
	})
}

// TestDMDeviceBound checks that the device's memory runs out at
// MaxDMSize, and comes back when freed. Through a daemon one user may
// hold half of it (daemon.Limits.DMBytes).
func TestDMDeviceBound(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		most := uint64(verbs.MaxDMSize)
		if m != inProcess {
			most /= 2
		}
		dm, err := p.a.AllocDM(most, 0)
		require.NoError(t, err)
		_, err = p.a.AllocDM(4, 0)
		require.ErrorIs(t, err, verbs.ErrNoDeviceMemory)
		require.NoError(t, dm.Free())
		dm, err = p.a.AllocDM(most, 0)
		require.NoError(t, err)
		require.NoError(t, dm.Free())
	})
}

// TestDMMRChecks checks ibv_reg_dm_mr's refusals: ZERO_BASED required,
// the range inside the allocation, and no free while a region is in it.
func TestDMMRChecks(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		pd := p.a.AllocPD()
		dm, err := p.a.AllocDM(100, 0)
		require.NoError(t, err)
		_, err = pd.RegDMMR(dm, 0, 100, verbs.AccessLocalWrite)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "without ZERO_BASED")
		_, err = pd.RegDMMR(dm, 0, 104, dmAccess)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "past the end")
		_, err = pd.RegDMMR(dm, 8, 96, dmAccess)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "past the end at an offset")
		_, err = pd.RegDMMR(dm, 0, 100, verbs.AccessZeroBased|verbs.AccessRemoteWrite)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "remote write without local write")
		empty, err := pd.RegDMMR(dm, 0, 0, dmAccess)
		require.NoError(t, err, "a region of nothing, as pyverbs' test_create_dm_mr makes")
		mr, err := pd.RegDMMR(dm, 4, 96, dmAccess)
		require.NoError(t, err)
		require.Zero(t, mr.Addr())
		require.ErrorIs(t, dm.Free(), verbs.ErrInvalidArgument, "regions are in it")
		require.NoError(t, mr.Dereg())
		require.NoError(t, empty.Dereg())
		require.NoError(t, dm.Free())
	})
}

// TestDMMRTraffic runs a region of device memory as a local SGE (SEND
// from it, receive into it) and under a peer's RDMA WRITE and READ, in
// both backends: the engines reach the memory the program copies to.
func TestDMMRTraffic(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		o := defaultOpts()
		_, x, y := connectedPairMode(t, m, memlink.Config{}, o)
		dm, err := y.dev.AllocDM(8192, 0)
		require.NoError(t, err)
		dmr, err := y.pd.RegDMMR(dm, 4096, 4096, dmAccess)
		require.NoError(t, err)
		t.Cleanup(func() { dmr.Dereg(); dm.Free() })
		lmr, lbuf := regMR(t, x.pd, 8192, allAccess)
		fill(lbuf, 9)
		post := func(wr verbs.SendWR) {
			wr.Flags |= verbs.SendSignaled
			require.NoError(t, x.qp.PostSend(&wr))
			waitOK(t, x.scq, wr.ID)
		}
		// A peer's WRITE at offset 100 of the region lands at 4196 of the DM.
		post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(0, 3000)}, RemoteAddr: 100, RKey: dmr.RKey()})
		got := make([]byte, 3000)
		require.NoError(t, dm.CopyFrom(got, 4196))
		require.Equal(t, lbuf[:3000], got)
		// A peer's READ takes what the program copied in.
		want := make([]byte, 2048)
		fill(want, 77)
		require.NoError(t, dm.CopyTo(4096+1024, want))
		post(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{lmr.SGE(4096, 2048)}, RemoteAddr: 1024, RKey: dmr.RKey()})
		require.Equal(t, want, lbuf[4096:4096+2048])
		// Past the region's end: the peer's access fails.
		wr := verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{lmr.SGE(0, 8)},
			RemoteAddr: 4092, RKey: dmr.RKey()}
		// As local SGEs: y receives into the region and sends from it.
		require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 4, SGL: []verbs.SGE{dmr.SGE(0, 512)}}))
		post(verbs.SendWR{ID: 5, Opcode: verbs.WRSend, SGL: []verbs.SGE{lmr.SGE(6000, 512)}})
		waitOK(t, y.rcq, 4)
		require.NoError(t, dm.CopyFrom(got[:512], 4096))
		require.Equal(t, lbuf[6000:6512], got[:512])
		require.NoError(t, x.qp.PostRecv(&verbs.RecvWR{ID: 6, SGL: []verbs.SGE{lmr.SGE(7000, 256)}}))
		require.NoError(t, y.qp.PostSend(&verbs.SendWR{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{dmr.SGE(1024, 256)}}))
		waitOK(t, y.scq, 7)
		waitOK(t, x.rcq, 6)
		require.Equal(t, want[:256], lbuf[7000:7256])
		require.NoError(t, x.qp.PostSend(&wr))
		require.Equal(t, verbs.WCRemAccessErr, waitWC(t, x.scq).Status)
	})
}
