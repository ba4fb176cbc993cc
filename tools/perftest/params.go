package perftest

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/tools/oob"
)

// AtomicType selects the atomic_bw operation (perftest's -A).
type AtomicType int

const (
	FetchAndAdd AtomicType = iota
	CmpAndSwap
)

func (a AtomicType) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// Output is perftest's verbosity (--output): the full report, or one
// number per test.
type Output int

const (
	OutputFull        Output = iota
	OutputBandwidth          // --output=bandwidth: the average bandwidth only
	OutputMessageRate        // --output=message_rate
	OutputLatency            // --output=latency: the average latency only
)

// ParseOutput maps an --output argument to its Output.
func ParseOutput(s string) (Output, error) {
	switch s {
	case "bandwidth":
		return OutputBandwidth, nil
	case "message_rate":
		return OutputMessageRate, nil
	case "latency":
		return OutputLatency, nil
	}
	return 0, fmt.Errorf("perftest: invalid verbosity level output flag %q: use bandwidth, latency, message_rate", s)
}

// Defaults of perftest 4.5 (perftest_parameters.h).
const (
	DefSizeBW     = 65536
	DefSizeLat    = 2
	DefSizeAtomic = 8
	DefItersWrite = 5000 // DEF_ITERS_WB, write_bw only
	DefIters      = 1000
	DefTxBW       = 128
	DefTxLat      = 1
	DefRxSend     = 512
	DefCQMod      = 100
	DefOutReads   = 16 // MAX_OUT_READ_HERMON: what ConnectX reports as max_qp_rd_atom
	DefCacheLine  = 64
	// DefRetryCount is DEF_RETRY_COUNT, the -R mode's rdma_cm retry count.
	DefRetryCount = 7
	// DefInlineWrite and DefInlineSend are the inline sizes of the
	// latency tests (DEF_INLINE_WRITE, DEF_INLINE_SEND_RC_UC_XRC).
	DefInlineWrite = 220
	DefInlineSend  = 236
	MaxSize        = 8388608 // -a runs sizes 2 .. 2^23
	// MsgSizeCQModLimit: above it perftest turns CQ moderation off
	// unless -Q was given.
	MsgSizeCQModLimit = 8192
	// NoPeakIters: above this many iterations perftest skips the peak.
	NoPeakIters = 20000
)

// Params is the test configuration, the part of perftest's struct
// perftest_parameters that softnic supports.
type Params struct {
	Test     oob.Test
	Server   bool
	Device   string // printed as perftest's "Device"; softnic's interface name
	Port     int    // TCP port of the exchange
	NumQPs   int
	Size     uint64
	Iters    uint64
	RunAll   bool // -a
	TxDepth  int
	RxDepth  int
	CQMod    int
	ReqCQMod bool // -Q given
	// MTU is the path MTU in bytes: -m, or the port's active MTU, and
	// after the exchange the minimum of both sides.
	MTU         int
	GIDIndex    int // -1 prints no GID lines
	InlineSize  int
	OutReads    int
	Atomic      AtomicType
	ReportGbits bool
	NoPeak      bool
	// TrafficClass is the GRH traffic class (--tclass).
	TrafficClass uint8
	// UseOldPostSend mirrors --use_old_post_send, printed as "ibv_wr* API".
	UseOldPostSend bool
	// QPTimeout is the RTS retransmit timeout exponent (-u, default 14).
	QPTimeout uint8
	// Output selects the full report or a single figure.
	Output Output
	// Duration, when not zero, runs the test for this long instead
	// of Iters messages (-D), measuring between a Margin at each end (-f;
	// default a quarter of the duration, in whole seconds as perftest).
	Duration time.Duration
	Margin   time.Duration
	// ReportBoth prints, after a bidirectional run's sum, each side's own
	// figures (--report-both).
	ReportBoth bool
	// IPv6 makes the default GID an IPv6 one (--ipv6); the default is
	// the first IPv4 GID.
	IPv6 bool
	// Duplex is perftest's -b: both sides run the test at once and print
	// the sum (bandwidth tests).
	Duplex bool
	// ReportUnsorted and ReportHistogram print the latency samples before
	// the figures (-U, -H).
	ReportUnsorted, ReportHistogram bool
	// RDMACM is perftest's -R: the exchange and the test QPs are
	// connected with rdma_cm (RunRDMACM) instead of the TCP exchange.
	RDMACM bool
	// RetryCount is the retry count the -R mode gives rdma_cm for the
	// test QPs, also as their RNR retry count (--retry_count, default 7).
	RetryCount uint8
	// StallTimeout ends a run that makes no progress for this long, as
	// perftest's check_alive does after 60 s (default 60 s).
	StallTimeout time.Duration
}

// full reports whether perftest would print its whole report.
func (p *Params) full() bool { return p.Output == OutputFull }

// NewParams returns perftest's defaults for test (init_perftest_params).
func NewParams(test oob.Test) Params {
	p := Params{
		Test:       test,
		Port:       oob.DefaultPort,
		RetryCount: DefRetryCount,
		NumQPs:     1,
		Iters:      DefIters,
		CQMod:      DefCQMod,
		GIDIndex:   -1,
		OutReads:   DefOutReads,
		RxDepth:    1,
		// DEF_INLINE: resolved by Finish.
		InlineSize: -1,
		// DEF_QP_TIME
		QPTimeout:    14,
		StallTimeout: 60 * time.Second,
		Margin:       -1,
	}
	if test.IsBW() {
		p.Size, p.TxDepth = DefSizeBW, DefTxBW
	} else {
		p.Size, p.TxDepth = DefSizeLat, DefTxLat
	}
	if test == oob.WriteBW {
		p.Iters = DefItersWrite
	}
	if test == oob.SendBW || test == oob.SendLat {
		p.RxDepth = DefRxSend
	}
	if test == oob.AtomicBW {
		p.Size = DefSizeAtomic
	}
	return p
}

// Verb is the verb of a test, as perftest's VerbType.
type Verb int

const (
	VerbSend Verb = iota
	VerbWrite
	VerbRead
	VerbAtomic
)

var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// Verb returns the test's verb.
func (p *Params) Verb() Verb {
	switch p.Test {
	case oob.SendBW, oob.SendLat:
		return VerbSend
	case oob.WriteBW, oob.WriteLat:
		return VerbWrite
	case oob.ReadBW, oob.ReadLat:
		return VerbRead
	}
	return VerbAtomic
}

// Finish applies perftest's dependencies between parameters
// (force_dependecies in perftest_parameters.c) that softnic's flags can
// reach. Call it after setting the flags, before the run.
func (p *Params) Finish() error {
	for _, check := range []func() error{p.checkModes, p.checkDuration, p.checkCounts} {
		if err := check(); err != nil {
			return err
		}
	}
	p.fitDepths()
	p.fitInline()
	if p.RunAll {
		p.Size = MaxSize
	}
	// perftest's "WA for a bug when rx_depth is odd in SEND".
	if p.Verb() == VerbSend && p.RxDepth%2 == 1 && !p.RunAll {
		p.RxDepth++
	}
	if p.Test.IsBW() && p.Iters > NoPeakIters {
		p.NoPeak = true
	}
	if p.Test == oob.SendBW && p.Server && !p.Duplex {
		p.NoPeak = true
	}
	return nil
}

// checkModes refuses an --output or -b the test does not have.
func (p *Params) checkModes() error {
	if p.Output != OutputFull {
		if p.Test.IsBW() && p.Output == OutputLatency {
			return fmt.Errorf("perftest: output verbosity level for BW can be: bandwidth, message_rate")
		}
		if !p.Test.IsBW() && p.Output != OutputLatency {
			return fmt.Errorf("perftest: output verbosity level for LAT can be: latency")
		}
	}
	if p.Duplex && !p.Test.IsBW() {
		return fmt.Errorf("perftest: -b (bidirectional) is for bandwidth tests")
	}
	return nil
}

// checkDuration checks -D and -f and sets the default margin; a timed
// run has no peak.
func (p *Params) checkDuration() error {
	if p.Duration <= 0 {
		return nil
	}
	switch {
	case p.RunAll:
		return fmt.Errorf("perftest: duration mode currently doesn't support running on all sizes")
	case p.Duplex:
		return fmt.Errorf("perftest: softnic does not combine -D with -b")
	}
	if p.Margin < 0 {
		// DEF_INIT_MARGIN: duration / 4 in whole seconds.
		p.Margin = time.Duration(int(p.Duration/time.Second)/4) * time.Second
	}
	if p.Duration <= 2*p.Margin {
		return fmt.Errorf("perftest: please check that DURATION > 2*MARGIN")
	}
	p.NoPeak = true
	return nil
}

// checkCounts checks the iterations, QPs and message size.
func (p *Params) checkCounts() error {
	switch {
	case p.Iters < 5 && p.Duration == 0:
		return fmt.Errorf("perftest: iterations must be at least 5")
	case p.NumQPs < 1:
		return fmt.Errorf("perftest: number of QPs must be at least 1")
	case p.Test == oob.AtomicBW && p.Size != DefSizeAtomic:
		return fmt.Errorf("perftest: message size cannot be changed for atomic tests")
	case !p.Test.IsBW() && p.NumQPs != 1:
		return fmt.Errorf("perftest: latency tests run one QP")
	}
	return nil
}

// fitDepths bounds the queue depths by the iterations and sets CQ
// moderation as perftest does.
func (p *Params) fitDepths() {
	if p.Duration == 0 {
		if uint64(p.TxDepth) > p.Iters {
			p.TxDepth = int(p.Iters)
		}
		if p.Verb() == VerbSend && uint64(p.RxDepth) > p.Iters {
			p.RxDepth = int(p.Iters)
		}
	}
	if p.Size > MsgSizeCQModLimit && !p.RunAll && !p.ReqCQMod {
		p.CQMod = 1
	}
	if p.CQMod > p.TxDepth {
		p.CQMod = p.TxDepth
	}
}

// fitInline resolves the default inline size and drops inline where the
// verb cannot send inline.
func (p *Params) fitInline() {
	if p.InlineSize < 0 {
		// ctx_set_max_inline for a device perftest recognises (softnic
		// sends inline like ConnectX): DEF_INLINE_WRITE and
		// DEF_INLINE_SEND_RC_UC_XRC for latency tests, 0 otherwise.
		p.InlineSize = 0
		if !p.Test.IsBW() {
			switch p.Verb() {
			case VerbWrite:
				p.InlineSize = DefInlineWrite
			case VerbSend:
				p.InlineSize = DefInlineSend
			}
		}
	}
	if p.Verb() == VerbRead || p.Verb() == VerbAtomic {
		p.InlineSize = 0
	}
}

// Sizes returns the message sizes of the run: Size, or 2 .. 2^23 with -a.
func (p *Params) Sizes() []uint64 {
	if !p.RunAll || p.Test == oob.AtomicBW {
		return []uint64{p.Size}
	}
	var s []uint64
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}
