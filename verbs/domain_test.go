package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestParentDomainChecks checks ibv_alloc_td's and
// ibv_alloc_parent_domain's refusals and the thread domain's hold, in
// both backends.
func TestParentDomainChecks(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		pd, otherPD := p.a.AllocPD(), p.b.AllocPD()
		td, otherTD := p.a.AllocTD(), p.b.AllocTD()
		_, err := p.a.AllocParentDomain(nil, td)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "no PD")
		_, err = p.a.AllocParentDomain(otherPD, td)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "another device's PD")
		_, err = p.a.AllocParentDomain(pd, otherTD)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "another device's TD")
		parent, err := p.a.AllocParentDomain(pd, td)
		require.NoError(t, err)
		c, ctd := parent.ParentDomain()
		require.Same(t, pd, c)
		require.Same(t, td, ctd)
		c, ctd = pd.ParentDomain()
		require.Nil(t, c)
		require.Nil(t, ctd)
		_, err = p.a.AllocParentDomain(parent, nil)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "a parent domain of a parent domain")
		require.ErrorIs(t, td.Dealloc(), verbs.ErrInvalidArgument, "a parent domain holds it")
		require.ErrorIs(t, pd.DeallocParentDomain(), verbs.ErrInvalidArgument, "not a parent domain")
		require.NoError(t, parent.DeallocParentDomain())
		require.ErrorIs(t, parent.DeallocParentDomain(), verbs.ErrInvalidArgument, "twice")
		require.NoError(t, td.Dealloc())
		require.ErrorIs(t, td.Dealloc(), verbs.ErrInvalidArgument, "twice")
		_, err = p.a.AllocParentDomain(pd, td)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "a freed TD")
	})
}

// TestParentDomainTraffic uses a parent domain where a PD goes: its MR,
// its QP with an SRQ of the contained PD, and the contained PD's MR under
// the peer's WRITE through the QP of the parent domain: they are one
// domain's objects.
func TestParentDomainTraffic(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		o := defaultOpts()
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		pd := p.b.AllocPD()
		parent, err := p.b.AllocParentDomain(pd, p.b.AllocTD())
		require.NoError(t, err)
		srq, err := pd.NewSRQ(64, 4)
		require.NoError(t, err)
		x := newEndpoint(t, p.a, nil, o, nil)
		y := newEndpoint(t, p.b, parent, o, srq)
		connect(t, x, y, o)
		lmr, lbuf := regMR(t, x.pd, 4096, allAccess)
		fill(lbuf, 5)
		rmr, rbuf := regMR(t, parent, 4096, allAccess)
		cmr, cbuf := regMR(t, pd, 4096, allAccess)
		require.NoError(t, srq.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, 1000)}}))
		post := func(wr verbs.SendWR) {
			wr.Flags |= verbs.SendSignaled
			require.NoError(t, x.qp.PostSend(&wr))
			waitOK(t, x.scq, wr.ID)
		}
		post(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{lmr.SGE(0, 1000)}})
		waitOK(t, y.rcq, 1)
		require.Equal(t, lbuf[:1000], rbuf[:1000])
		post(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{lmr.SGE(1000, 2000)}, RemoteAddr: cmr.Addr(),
			RKey: cmr.RKey()})
		require.Equal(t, lbuf[1000:3000], cbuf[:2000])
		require.NoError(t, parent.DeallocParentDomain())
	})
}
