package metrics_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/metrics"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// fakeDevice has the counters a test gives it.
type fakeDevice struct {
	cs   []counters.Counter
	refs []ibv.QPCountersRef
}

func (f *fakeDevice) Counters() []counters.Counter       { return f.cs }
func (f *fakeDevice) QPCounterRefs() []ibv.QPCountersRef { return f.refs }

// gather collects c once and returns its families by name.
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	return byName
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// 10,000 QPs give the busiest few a series each and sum the rest, so a
// scrape stays small; the device counters are there with their labels.
func TestQPSeriesBounded(t *testing.T) {
	dev := &fakeDevice{cs: []counters.Counter{{Name: "sent_pkts", Value: 12}, {Name: "rx_bad_icrc", Value: 3}}}
	const n = 10000
	for i := range n {
		c := new(ibv.QPCounters)
		c.TxPackets.Store(1)
		if i%1000 == 7 { // ten busy QPs
			c.TxBytes.Store(uint64(1000 + i))
		}
		dev.refs = append(dev.refs, ibv.QPCountersRef{QPN: uint32(100 + i), Ctr: c})
	}
	fams := gather(t, metrics.NewCollector([]metrics.Source{{Name: "softnic_mem0", Dev: dev}}, metrics.Config{TopQPs: 4}))

	sent := fams["softnic_sent_pkts_total"]
	require.NotNil(t, sent)
	require.Equal(t, dto.MetricType_COUNTER, sent.GetType())
	require.Len(t, sent.GetMetric(), 1)
	m := sent.GetMetric()[0]
	require.Equal(t, 12.0, m.GetCounter().GetValue())
	require.Equal(t, "softnic_mem0", label(m, "device"))
	require.Equal(t, "1", label(m, "port"))
	require.Equal(t, 3.0, fams["softnic_rx_bad_icrc_total"].GetMetric()[0].GetCounter().GetValue())

	qp := fams["softnic_qp_sent_pkts_total"]
	require.Len(t, qp.GetMetric(), 4, "the top 4 only")
	var qpns []string
	for _, m := range qp.GetMetric() {
		qpns = append(qpns, label(m, "qpn"))
	}
	require.ElementsMatch(t, []string{"9107", "8107", "7107", "6107"}, qpns, "the QPs with the most bytes")
	require.Equal(t, float64(n), fams["softnic_qps"].GetMetric()[0].GetGauge().GetValue())
	require.Equal(t, float64(n-4), fams["softnic_qps_omitted"].GetMetric()[0].GetGauge().GetValue())
	require.Equal(t, float64(n-4), fams["softnic_qp_others_sent_pkts"].GetMetric()[0].GetGauge().GetValue())
	series := 0
	for _, f := range fams {
		series += len(f.GetMetric())
	}
	require.Less(t, series, 200, "a scrape of 10,000 QPs")

	fams = gather(t, metrics.NewCollector([]metrics.Source{{Name: "softnic_mem0", Dev: dev}}, metrics.Config{TopQPs: -1}))
	require.Nil(t, fams["softnic_qp_sent_pkts_total"], "no QP series")
	require.Equal(t, float64(n), fams["softnic_qp_others_sent_pkts"].GetMetric()[0].GetGauge().GetValue())
}

// A daemon serving an in-memory device with 10,000 QPs: the collector
// reads them through the daemon's Server, one connected QP with traffic
// gets its series, and the scrape stays bounded.
func TestDaemonManyQPs(t *testing.T) {
	la, lb := memlink.Pair(memlink.Config{})
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.1")}})
	require.NoError(t, err)
	defer a.Close()
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.2")}})
	require.NoError(t, err)
	defer b.Close()
	srv, err := daemon.Serve(a, daemon.Config{Socket: filepath.Join(t.TempDir(), "softnic_mem0.sock"), Group: -1})
	require.NoError(t, err)
	defer srv.Close()

	pd := a.AllocPD()
	cq, err := a.CreateCQ(16, nil)
	require.NoError(t, err)
	const n = 10000
	for range n {
		_, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
	}
	qpn := sendOne(t, a, b)

	fams := gather(t, metrics.NewCollector([]metrics.Source{{Name: "softnic_mem0", Dev: srv}}, metrics.Config{TopQPs: 3}))
	require.GreaterOrEqual(t, fams["softnic_qps"].GetMetric()[0].GetGauge().GetValue(), float64(n+1))
	qps := fams["softnic_qp_sent_bytes_total"].GetMetric()
	require.Len(t, qps, 3)
	var busy *dto.Metric
	for _, m := range qps {
		if label(m, "qpn") == qpn {
			busy = m
		}
	}
	require.NotNil(t, busy, "the QP that sent is among the top")
	require.NotZero(t, busy.GetCounter().GetValue())
	require.NotZero(t, fams["softnic_sent_pkts_total"].GetMetric()[0].GetCounter().GetValue())
	require.Contains(t, fams, "softnic_doorbell_wakeups_total")
	for name := range fams {
		require.True(t, strings.HasPrefix(name, "softnic_"), name)
	}
}

// sendOne connects an RC QP of a to one of b, WRITEs 4 KiB and waits for
// its completion; it returns a's QP number.
func sendOne(t *testing.T, a, b *verbs.Device) string {
	t.Helper()
	type end struct {
		dev *verbs.Device
		pd  *verbs.PD
		cq  *verbs.CQ
		qp  *verbs.QP
		mr  *verbs.MR
	}
	mk := func(d *verbs.Device) *end {
		e := &end{dev: d, pd: d.AllocPD()}
		var err error
		e.cq, err = d.CreateCQ(16, nil)
		require.NoError(t, err)
		e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		e.mr, err = e.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		require.NoError(t, err)
		return e
	}
	x, y := mk(a), mk(b)
	for _, s := range [][2]*end{{x, y}, {y, x}} {
		me, peer := s[0], s[1]
		gid, err := peer.dev.GID(0)
		require.NoError(t, err)
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, AccessFlags: verbs.AccessRemoteWrite, Port: 1},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			MaxDestRdAtomic: 1, MinRNRTimer: 1, AV: verbs.AddressVector{DGID: gid, HopLimit: 64}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		require.NoError(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
	}
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{x.mr.SGE(0, 4096)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	n, err := x.cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, verbs.WCSuccess, wc[0].Status)
	return strconv.FormatUint(uint64(x.qp.QPN()), 10)
}

// A counter name Prometheus refuses fails the scrape with an error; the
// daemon does not panic, and the other counters are still gathered.
func TestBadNameIsAnError(t *testing.T) {
	dev := &fakeDevice{cs: []counters.Counter{{Name: "sent_pkts", Value: 1}, {Name: "bad\xffname", Value: 2}}}
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector([]metrics.Source{{Name: "softnic_mem0", Dev: dev}}, metrics.Config{})))
	fams, err := reg.Gather()
	require.Error(t, err)
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	require.Contains(t, names, "softnic_sent_pkts_total")
}
