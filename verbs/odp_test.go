package verbs_test

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// addrOf is the virtual address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// writeTo posts an RDMA WRITE of src's region's first n bytes to addr
// under rkey, and returns its completion's status.
func writeTo(t *testing.T, x *endpoint, src *verbs.MR, n int, addr uint64, rkey uint32) verbs.WCStatus {
	t.Helper()
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		RemoteAddr: addr, RKey: rkey, SGL: []verbs.SGE{src.SGE(0, n)}}))
	wc := waitWC(t, x.scq)
	require.Equal(t, uint64(1), wc.WRID)
	return wc.Status
}

// Both backends report the same ODP caps: the daemon's client takes them
// from hostif's SN_ODP_*, the engine from verbs.DeviceODPCaps.
func TestODPCaps(t *testing.T) { forEachMode(t, testODPCaps) }

func testODPCaps(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	caps := p.a.Query().ODP
	require.Equal(t, verbs.DeviceODPCaps, caps)
	require.NotZero(t, caps.General&verbs.ODPSupport)
	require.NotZero(t, caps.General&verbs.ODPSupportImplicit)
	rc := uint32(verbs.ODPSend | verbs.ODPRecv | verbs.ODPWrite | verbs.ODPRead | verbs.ODPAtomic | verbs.ODPSRQRecv)
	require.Equal(t, rc, caps.RC&rc)
}

// An ODP region takes SENDs, RDMA WRITEs, READs and atomics as any other.
func TestODPRegionTraffic(t *testing.T) { forEachMode(t, testODPRegionTraffic) }

func testODPRegionTraffic(t *testing.T, m mode) {
	_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
	src, sbuf := regMR(t, x.pd, 4096, allAccess|verbs.AccessOnDemand)
	dst, dbuf := regMR(t, y.pd, 4096, allAccess|verbs.AccessOnDemand|verbs.AccessHugeTLB)
	require.True(t, dst.OnDemand())
	_, err := y.pd.RegMR(make([]byte, 8), verbs.AccessLocalWrite|1<<12)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument, "an unknown access flag")
	fill(sbuf, 3)
	require.Equal(t, verbs.WCSuccess, writeTo(t, x, src, 1000, dst.Addr()+8, dst.RKey()))
	require.Equal(t, sbuf[:1000], dbuf[8:1008])

	require.NoError(t, y.qp.PostRecv(&verbs.RecvWR{ID: 7, SGL: []verbs.SGE{dst.SGE(2048, 2048)}}))
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(100, 500)}}))
	waitOK(t, x.scq, 2)
	require.Equal(t, 500, int(waitOK(t, y.rcq, 7).ByteLen))
	require.Equal(t, sbuf[100:600], dbuf[2048:2548])

	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
		RemoteAddr: dst.Addr() + 4000, RKey: dst.RKey(), CompareAdd: 5, SGL: []verbs.SGE{src.SGE(3000, 8)}}))
	waitOK(t, x.scq, 3)
}

// An implicit region is the whole address space: a peer writes any
// mapped, writable address under its rkey; an unmapped one or a read-only
// mapping is a remote access error, and nothing there changes.
func TestImplicitODP(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		for _, c := range []struct {
			name   string
			target func(t *testing.T) ([]byte, func() []byte)
			status verbs.WCStatus
		}{
			{"heap", func(*testing.T) ([]byte, func() []byte) {
				b := make([]byte, 4096)
				return b, func() []byte { return b }
			}, verbs.WCSuccess},
			{"unmapped", func(t *testing.T) ([]byte, func() []byte) {
				b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
				require.NoError(t, err)
				gone := b[:4096:4096]
				require.NoError(t, unix.Munmap(b))
				return gone, nil
			}, verbs.WCRemAccessErr},
			{"read-only", func(t *testing.T) ([]byte, func() []byte) {
				b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_ANON|unix.MAP_PRIVATE)
				require.NoError(t, err)
				t.Cleanup(func() { unix.Munmap(b) })
				return b, func() []byte { return b }
			}, verbs.WCRemAccessErr},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
				implicit, err := y.pd.RegImplicitMR(allAccess)
				require.NoError(t, err)
				defer implicit.Dereg()
				require.True(t, implicit.OnDemand())
				require.Zero(t, implicit.Addr())
				src, sbuf := regMR(t, x.pd, 4096, allAccess)
				fill(sbuf, 9)
				target, now := c.target(t)
				require.Equal(t, c.status, writeTo(t, x, src, 512, addrOf(target)+64, implicit.RKey()))
				if now == nil {
					return
				}
				want := make([]byte, 512)
				if c.status == verbs.WCSuccess {
					want = sbuf[:512]
				}
				require.True(t, bytes.Equal(want, now()[64:576]))
			})
		}
	})
}

// AdviseMR checks its SGEs as mlx5 does and faults their ranges in.
func TestAdviseMR(t *testing.T) { forEachMode(t, testAdviseMR) }

func testAdviseMR(t *testing.T, m mode) {
	p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
	pd := p.a.AllocPD()
	odp, _ := regMR(t, pd, 8192, verbs.AccessLocalWrite|verbs.AccessOnDemand)
	readOnly, _ := regMR(t, pd, 4096, verbs.AccessRemoteRead|verbs.AccessOnDemand)
	plain, _ := regMR(t, pd, 4096, verbs.AccessLocalWrite)
	other, _ := regMR(t, p.a.AllocPD(), 4096, verbs.AccessLocalWrite|verbs.AccessOnDemand)
	flush := verbs.AdviseFlush
	for _, a := range []verbs.Advice{verbs.AdvicePrefetch, verbs.AdvicePrefetchWrite, verbs.AdvicePrefetchNoFault} {
		require.NoError(t, pd.AdviseMR(a, flush, []verbs.SGE{odp.SGE(0, 8192)}), "advice %d", a)
		require.NoError(t, pd.AdviseMR(a, 0, []verbs.SGE{odp.SGE(100, 100), odp.SGE(4096, 4096)}))
	}
	require.ErrorIs(t, pd.AdviseMR(verbs.AdvicePrefetch, 2, []verbs.SGE{odp.SGE(0, 1)}), verbs.ErrInvalidArgument)
	require.ErrorIs(t, pd.AdviseMR(verbs.AdvicePrefetch, flush, nil), verbs.ErrInvalidArgument)
	require.ErrorIs(t, pd.AdviseMR(3, flush, []verbs.SGE{odp.SGE(0, 1)}), verbs.ErrNotSupported)
	for _, mr := range []*verbs.MR{plain, other} { // not ODP; another PD's
		require.ErrorIs(t, pd.AdviseMR(verbs.AdvicePrefetch, flush, []verbs.SGE{mr.SGE(0, 1)}), verbs.ErrNoRegion)
		err := pd.AdviseMR(verbs.AdvicePrefetch, 0, []verbs.SGE{odp.SGE(0, 1), mr.SGE(0, 1)})
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	}
	require.NoError(t, pd.AdviseMR(verbs.AdvicePrefetch, flush, []verbs.SGE{readOnly.SGE(0, 4096)}))
	require.ErrorIs(t, pd.AdviseMR(verbs.AdvicePrefetchWrite, flush, []verbs.SGE{readOnly.SGE(0, 1)}), verbs.ErrNoRegion)
	require.ErrorIs(t, pd.AdviseMR(verbs.AdvicePrefetch, flush, []verbs.SGE{odp.SGE(8000, 200)}), verbs.ErrFault)

	implicit, err := pd.RegImplicitMR(verbs.AccessLocalWrite)
	require.NoError(t, err)
	defer implicit.Dereg()
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer unix.Munmap(b)
	at := verbs.SGE{Addr: addrOf(b), Length: 4096, LKey: implicit.LKey()}
	require.NoError(t, pd.AdviseMR(verbs.AdvicePrefetch, flush, []verbs.SGE{at}))
	require.ErrorIs(t, pd.AdviseMR(verbs.AdvicePrefetchWrite, flush, []verbs.SGE{at}), verbs.ErrFault)
	require.NoError(t, pd.AdviseMR(verbs.AdvicePrefetchWrite, 0, []verbs.SGE{at}), "a queued prefetch reports no fault")
}

// Rereg changes a region in place: its rights, its PD, its memory.
func TestReregMR(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		t.Run("access", func(t *testing.T) {
			_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
			src, _ := regMR(t, x.pd, 4096, allAccess)
			dst, _ := regMR(t, y.pd, 4096, verbs.AccessLocalWrite)
			require.NoError(t, dst.Rereg(verbs.ReregChangeAccess, nil, nil, allAccess))
			require.Equal(t, allAccess, dst.Access())
			require.Equal(t, verbs.WCSuccess, writeTo(t, x, src, 100, dst.Addr(), dst.RKey()))
			require.NoError(t, dst.Rereg(verbs.ReregChangeAccess, nil, nil, verbs.AccessLocalWrite))
			require.Equal(t, verbs.WCRemAccessErr, writeTo(t, x, src, 100, dst.Addr(), dst.RKey()))
		})
		t.Run("pd", func(t *testing.T) {
			_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
			src, _ := regMR(t, x.pd, 4096, allAccess)
			dst, _ := regMR(t, y.pd, 4096, allAccess)
			lkey, rkey := dst.LKey(), dst.RKey()
			other := y.dev.AllocPD()
			require.NoError(t, dst.Rereg(verbs.ReregChangePD, other, nil, 0))
			require.Equal(t, other, dst.PD())
			require.Equal(t, [2]uint32{lkey, rkey}, [2]uint32{dst.LKey(), dst.RKey()}, "keys as mlx5's UMR rereg")
			require.Equal(t, verbs.WCRemAccessErr, writeTo(t, x, src, 100, dst.Addr(), dst.RKey()))
		})
		t.Run("translation", func(t *testing.T) {
			_, x, y := connectedPairMode(t, m, memlink.Config{}, defaultOpts())
			src, sbuf := regMR(t, x.pd, 4096, allAccess)
			fill(sbuf, 5)
			dst, _ := regMR(t, y.pd, 4096, allAccess)
			old := dst.Addr()
			next := make([]byte, 8192)
			require.NoError(t, dst.Rereg(verbs.ReregChangeTranslation, nil, next, 0))
			require.Equal(t, addrOf(next), dst.Addr())
			require.Equal(t, 8192, dst.Len())
			require.Equal(t, verbs.WCSuccess, writeTo(t, x, src, 300, dst.Addr()+5000, dst.RKey()))
			require.Equal(t, sbuf[:300], next[5000:5300])
			if old+4096 <= dst.Addr() || old >= dst.Addr()+8192 {
				require.Equal(t, verbs.WCRemAccessErr, writeTo(t, x, src, 1, old, dst.RKey()))
			}
		})
		t.Run("errors", func(t *testing.T) {
			p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
			pd := p.a.AllocPD()
			mr, _ := regMR(t, pd, 4096, allAccess)
			for _, c := range []struct {
				flags  verbs.ReregFlags
				pd     *verbs.PD
				buf    []byte
				access verbs.Access
			}{
				{0, nil, nil, 0},
				{1 << 3, nil, nil, 0},
				{verbs.ReregChangeTranslation, nil, nil, 0},
				{verbs.ReregChangePD, nil, nil, allAccess},
				{verbs.ReregChangePD, p.b.AllocPD(), nil, 0},
				{verbs.ReregChangeAccess, nil, nil, verbs.AccessRemoteWrite},
			} {
				require.ErrorIs(t, mr.Rereg(c.flags, c.pd, c.buf, c.access), verbs.ErrInvalidArgument, "%+v", c)
			}
		})
	})
}
