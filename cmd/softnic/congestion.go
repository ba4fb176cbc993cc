package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// congestionOptions are the flags of ECN and DCQCN (roce.DeviceConfig,
// ibtransport.CongestionConfig) for a device this process opens on an
// interface: `softnic daemon`'s, and the in-process tools' with a
// "softnic-" prefix. Rates are in Mb/s as ConnectX's parameters are.
type congestionOptions struct {
	ecn             string
	cnpDSCP         int
	off             bool
	cc              ibtransport.CongestionConfig
	minRate, ai, ha rateFlag
	// lineRate is --line-rate; lineRateSet whether it was given: if not,
	// the interface's speed is the line rate, as a NIC's port speed is.
	lineRate        rateFlag
	lineRateSet     bool
	g, initialAlpha uint
	gd, minDecFac   uint
	byteReset       uint64
	pacingBurst     uint
	// rxeFlushICRC is --rxe-flush-icrc, a wire format setting of the
	// device rather than congestion control, kept here because these
	// are the flags of a device this process opens.
	rxeFlushICRC bool
}

// congestion holds the flags' values (package-wide, like keepIRQs: the
// device opens far from the flag parsing).
var congestion congestionOptions

// define registers the flags on fs, each name after prefix. The defaults
// shown are ConnectX's (ibtransport.DefaultCongestionConfig).
func (o *congestionOptions) define(fs *flag.FlagSet, prefix string) {
	d := ibtransport.DefaultCongestionConfig()
	s := func(name string) string { return prefix + name }
	fs.StringVar(&o.ecn, s("ecn"), "ect0", "ECN codepoint of the packets sent: ect0, ect1, or off (the QP's traffic class unchanged, as Linux rxe)")
	fs.IntVar(&o.cnpDSCP, s("cnp-dscp"), roce.DefaultCNPDSCP, "DSCP of the CNPs sent")
	fs.BoolVar(&o.off, s("cc-off"), false, "congestion control off: send no CNP and ignore those received (ECN marking stays as --"+s("ecn")+" says)")
	fs.BoolVar(&o.cc.NPOff, s("np-off"), false, "notification point off: send no CNP for packets marked CE")
	fs.BoolVar(&o.cc.RPOff, s("rp-off"), false, "reaction point off: ignore CNPs (no DCQCN rate limit)")
	fs.DurationVar(&o.cc.CNPInterval, s("cnp-interval"), d.CNPInterval, "least time between two CNPs for one QP (min_time_between_cnps)")
	o.lineRate, o.minRate, o.ai, o.ha = rateFlag(d.LineRate), rateFlag(d.MinRate), rateFlag(d.AIRate), rateFlag(d.HAIRate)
	fs.Var(lineRateFlag{o}, s("line-rate"), "DCQCN: rate a QP starts from and climbs back to, Mb/s (or with a k, M or G suffix, bits/s; default: the interface's speed, else 100G)")
	fs.Var(&o.minRate, s("rpg-min-rate"), "DCQCN: least rate, Mb/s or with a suffix")
	fs.Var(&o.ai, s("rpg-ai-rate"), "DCQCN: additive increase, Mb/s or with a suffix")
	fs.Var(&o.ha, s("rpg-hai-rate"), "DCQCN: hyper increase, Mb/s or with a suffix")
	fs.DurationVar(&o.cc.TimeReset, s("rpg-time-reset"), d.TimeReset, "DCQCN: rate increase timer")
	fs.Uint64Var(&o.byteReset, s("rpg-byte-reset"), d.ByteReset, "DCQCN: rate increase byte counter, bytes")
	fs.IntVar(&o.cc.Threshold, s("rpg-threshold"), d.Threshold, "DCQCN: increase events of fast recovery (F)")
	fs.BoolVar(&o.cc.IncreaseUnused, s("rpg-increase-unused"), false, "DCQCN: raise a QP's rate on every increase event, as ConnectX does, also when the QP sent below it (by default only a rate the pacer held the QP to grows)")
	fs.BoolVar(&o.cc.MultipliedHAI, s("rpg-hai-multiplied"), false, "DCQCN: a hyper increase adds i times rpg-hai-rate, i the events since it began (the paper), not once per event (ConnectX as HPCC's simulator models it)")
	fs.UintVar(&o.gd, s("rpg-gd"), uint(d.GD), "DCQCN: a cut takes alpha*1024/2^gd of the rate")
	fs.UintVar(&o.minDecFac, s("rpg-min-dec-fac"), uint(d.MinDecFac), "DCQCN: largest cut, percent")
	fs.DurationVar(&o.cc.ReduceMonitorPeriod, s("rate-reduce-monitor-period"), d.ReduceMonitorPeriod, "DCQCN: least time between two cuts")
	fs.UintVar(&o.g, s("dce-tcp-g"), uint(d.G), "DCQCN: alpha keeps g/1024 of itself per alpha period, a CNP adds (1024-g)/1024")
	fs.DurationVar(&o.cc.AlphaPeriod, s("dce-tcp-rtt"), d.AlphaPeriod, "DCQCN: alpha period")
	fs.UintVar(&o.initialAlpha, s("initial-alpha-value"), uint(d.InitialAlpha), "DCQCN: alpha at the first CNP, in 1/1023")
	fs.BoolVar(&o.rxeFlushICRC, s("rxe-flush-icrc"), false, "send RC FLUSH requests with Linux rdma_rxe's ICRC (its headers hashed twice, rxe 6.2 to at least 6.12) "+
		"and take FLUSHes with it as well as IBA's: for rxe peers only, an IBA-correct peer (ConnectX) drops such FLUSHes")
	fs.UintVar(&o.pacingBurst, s("pacing-burst"), uint(d.PacingBurst), "DCQCN: most bytes a rate-limited QP sends at once to catch up after the engine could not send (0: what its rate gives in 50 µs)")
}

// lineRateFlag is --line-rate: it notes that it was given.
type lineRateFlag struct{ o *congestionOptions }

func (f lineRateFlag) String() string {
	if f.o == nil {
		return ""
	}
	return f.o.lineRate.String()
}

func (f lineRateFlag) Set(s string) error {
	f.o.lineRateSet = true
	return f.o.lineRate.Set(s)
}

// interfaceSpeed returns the speed of interface ifname in bits/s as the
// kernel reports it (/sys/class/net/IFACE/speed, Mb/s; veth says
// 10000), 0 when it reports none.
func interfaceSpeed(ifname string) uint64 {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", ifname, "speed"))
	if err != nil {
		return 0
	}
	mbps, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || mbps <= 0 {
		return 0
	}
	return uint64(mbps) * 1e6
}

// forInterface returns the options for a device on ifname: without
// --line-rate, the interface's speed is the line rate.
func (o *congestionOptions) forInterface(ifname string) *congestionOptions {
	c := *o
	if !c.lineRateSet {
		if sp := interfaceSpeed(ifname); sp > 0 {
			c.lineRate = rateFlag(sp)
		}
	}
	return &c
}

// apply puts the flags' settings into cfg, checked.
func (o *congestionOptions) apply(cfg *verbs.Config) error {
	ecn, err := roce.ParseECN(o.ecn)
	if err != nil {
		return err
	}
	if o.cnpDSCP < 0 || o.cnpDSCP > 63 {
		return fmt.Errorf("CNP DSCP %d: want 0 to 63", o.cnpDSCP)
	}
	if o.g > 1024 || o.initialAlpha > 1023 || o.gd > 20 || o.minDecFac > 100 {
		return fmt.Errorf("DCQCN: dce-tcp-g %d, initial-alpha-value %d, rpg-gd %d or rpg-min-dec-fac %d out of range",
			o.g, o.initialAlpha, o.gd, o.minDecFac)
	}
	cc := o.cc
	if o.off {
		cc.NPOff, cc.RPOff = true, true
	}
	cc.LineRate, cc.MinRate, cc.AIRate, cc.HAIRate = uint64(o.lineRate), uint64(o.minRate), uint64(o.ai), uint64(o.ha)
	cc.G, cc.InitialAlpha, cc.GD, cc.MinDecFac = uint16(o.g), uint16(o.initialAlpha), uint8(o.gd), uint8(o.minDecFac)
	cc.ByteReset = o.byteReset
	if o.pacingBurst > math.MaxUint32 {
		return fmt.Errorf("DCQCN: pacing-burst %d out of range", o.pacingBurst)
	}
	cc.PacingBurst = uint32(o.pacingBurst)
	if err := cc.Check(); err != nil {
		return err
	}
	cfg.ECN, cfg.Congestion = ecn, cc
	cfg.RxeFlushICRC = o.rxeFlushICRC
	cfg.CNPDSCP = o.cnpDSCP
	if o.cnpDSCP == 0 {
		cfg.CNPDSCP = -1 // DSCP 0 asked for: roce's 0 means the default
	}
	return nil
}

// The defaults of a process that defines no flags (tests open devices
// without parsing any): ConnectX's.
func init() {
	d := ibtransport.DefaultCongestionConfig()
	congestion = congestionOptions{ecn: "ect0", cnpDSCP: roce.DefaultCNPDSCP, cc: d, lineRate: rateFlag(d.LineRate),
		minRate: rateFlag(d.MinRate), ai: rateFlag(d.AIRate), ha: rateFlag(d.HAIRate), g: uint(d.G), initialAlpha: uint(d.InitialAlpha),
		gd: uint(d.GD), minDecFac: uint(d.MinDecFac), byteReset: d.ByteReset}
}

// rateFlag is a rate in bits/s given in Mb/s, as ConnectX's parameters
// are, or with a k, M or G suffix (powers of 1000): "5" and "5M" are
// 5 Mb/s, "50k" is 50 kb/s.
type rateFlag uint64

func (r *rateFlag) String() string {
	switch v := uint64(*r); {
	case v%1e9 == 0 && v > 0:
		return strconv.FormatUint(v/1e9, 10) + "G"
	case v%1e6 == 0:
		return strconv.FormatUint(v/1e6, 10)
	default:
		return strconv.FormatUint(v/1e3, 10) + "k"
	}
}

func (r *rateFlag) Set(s string) error {
	unit := 1e6
	switch {
	case strings.HasSuffix(s, "k"):
		s, unit = strings.TrimSuffix(s, "k"), 1e3
	case strings.HasSuffix(s, "M"):
		s = strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		s, unit = strings.TrimSuffix(s, "G"), 1e9
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v*unit > 1e13 {
		return fmt.Errorf("rate %q: want Mb/s, or a number with k, M or G", s)
	}
	*r = rateFlag(v * unit)
	return nil
}
