// Package metrics serves a daemon's counters as Prometheus metrics
// (`softnic daemon --metrics ADDR`).
//
// Every device counter (verbs.Device.DeviceCounters' names) is a counter
// family softnic_NAME_total with the labels device and port, as
// `rdma statistic show` names them per port. Per-QP counters are
// softnic_qp_NAME_total with a qpn label too, for the QPs that moved the
// most bytes only (Config.TopQPs): a device with 10,000 QPs does not put
// 10,000 series of each counter in every scrape. What the other QPs
// counted is in softnic_qp_others_NAME, a gauge (a QP that joins the top
// takes its counts with it, so the sum may go down), and
// softnic_qps{device,port} and softnic_qps_omitted{device,port} say how
// many QPs there are and how many are not shown one by one. The device
// counters are the totals over every QP, shown or not.
package metrics

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// Device is what the metrics read of one served device: daemon.Server
// implements it.
type Device interface {
	// Counters returns the device's counters by name.
	Counters() []counters.Counter
	// QPCounterRefs returns every QP's number and live counters.
	QPCounterRefs() []ibv.QPCountersRef
}

// Source is one served device and its name (softnic_IFACE).
type Source struct {
	Name string
	Dev  Device
}

// DefaultTopQPs is how many QPs of a device get series of their own when
// Config.TopQPs is 0.
const DefaultTopQPs = 16

// Config sets what the collector reports.
type Config struct {
	// TopQPs bounds the QPs of a device that get series of their own: the
	// ones with the most bytes sent and received (default DefaultTopQPs;
	// negative: none).
	TopQPs int
}

// Collector is a prometheus.Collector over the daemon's devices. Its
// families are named after the counters as it finds them, so it is an
// unchecked collector: Describe sends nothing.
type Collector struct {
	sources []Source
	top     int
}

// NewCollector returns a collector of the sources' counters.
func NewCollector(sources []Source, cfg Config) *Collector {
	top := cfg.TopQPs
	if top == 0 {
		top = DefaultTopQPs
	}
	return &Collector{sources: sources, top: max(top, 0)}
}

// Describe implements prometheus.Collector; it describes nothing, which
// makes the collector unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: it reads every counter afresh.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	descs := descCache{}
	for _, s := range c.sources {
		for _, ctr := range s.Dev.Counters() {
			d := descs.get("softnic_"+ctr.Name+"_total", "softnic device counter "+ctr.Name+" (softnic stat)", "device", "port")
			ch <- metric(d, prometheus.CounterValue, ctr.Value, s.Name, "1")
		}
		c.collectQPs(ch, descs, s)
	}
}

// collectQPs reports the device's busiest QPs one by one and the others
// summed.
func (c *Collector) collectQPs(ch chan<- prometheus.Metric, descs descCache, s Source) {
	refs := s.Dev.QPCounterRefs()
	top, others := busiest(refs, c.top)
	gauge := func(name, help string, v int) {
		ch <- metric(descs.get(name, help, "device", "port"), prometheus.GaugeValue, uint64(v), s.Name, "1")
	}
	gauge("softnic_qps", "QPs of the device, QP1 included", len(refs))
	gauge("softnic_qps_omitted", "QPs of the device without series of their own (softnic_qp_others_*)", len(others))
	for _, r := range top {
		qpn := strconv.FormatUint(uint64(r.QPN), 10)
		for _, ctr := range counters.Append(nil, "", r.Ctr) {
			d := descs.get("softnic_qp_"+ctr.Name+"_total", "softnic QP counter "+ctr.Name+" (softnic stat --qp)", "device", "port", "qpn")
			ch <- metric(d, prometheus.CounterValue, ctr.Value, s.Name, "1", qpn)
		}
	}
	var sum ibv.QPCounters
	for _, r := range others {
		ibv.AddCounters(&sum, r.Ctr)
	}
	for _, ctr := range counters.Append(nil, "", &sum) {
		d := descs.get("softnic_qp_others_"+ctr.Name, "softnic QP counter "+ctr.Name+", summed over the QPs without series of their own", "device", "port")
		ch <- metric(d, prometheus.GaugeValue, ctr.Value, s.Name, "1")
	}
}

// metric makes one sample; a name or label the registry would refuse
// becomes an error of the scrape, not a panic of the daemon.
func metric(d *prometheus.Desc, t prometheus.ValueType, v uint64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, float64(v), labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// busiest splits refs into the n that sent and received the most bytes,
// in QPN order, and the others.
func busiest(refs []ibv.QPCountersRef, n int) (top, others []ibv.QPCountersRef) {
	if len(refs) <= n {
		return refs, nil
	}
	type ranked struct {
		ref   ibv.QPCountersRef
		bytes uint64
	}
	rs := make([]ranked, len(refs))
	for i, r := range refs {
		rs[i] = ranked{r, r.Ctr.TxBytes.Load() + r.Ctr.RxBytes.Load()}
	}
	// Most bytes first; ties to the lower QPN, so the choice is stable.
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.ref.QPN, b.ref.QPN))
	})
	for i, r := range rs {
		if i < n {
			top = append(top, r.ref)
		} else {
			others = append(others, r.ref)
		}
	}
	slices.SortFunc(top, func(a, b ibv.QPCountersRef) int { return cmp.Compare(a.QPN, b.QPN) })
	return top, others
}

// descCache makes each family's description once a scrape.
type descCache map[string]*prometheus.Desc

func (d descCache) get(name, help string, labels ...string) *prometheus.Desc {
	if x, ok := d[name]; ok {
		return x
	}
	x := prometheus.NewDesc(name, help, labels, nil)
	d[name] = x
	return x
}
