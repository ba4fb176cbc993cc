package perftest

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/softnic/softnic/tools/oob"
)

// Layout strings of perftest_parameters.h (perftest 4.5-0.17).
const (
	ResultLine      = "---------------------------------------------------------------------------------------\n"
	resultFmt       = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	resultFmtG      = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"
	resultFmtLat    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	waitBanner      = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
)

// PrintWaiting prints the banner a perftest server shows before accepting.
func PrintWaiting(w io.Writer, p *Params) {
	if p.full() {
		io.WriteString(w, waitBanner)
	}
}

// PrintEnd prints the line that closes a full report.
func PrintEnd(w io.Writer, p *Params) {
	if p.full() {
		io.WriteString(w, ResultLine)
	}
}

// PrintTestInfo prints the header block (ctx_print_test_info). softnic
// prints "PCIe relax order: Unsupported", as perftest built without
// HAVE_RO does: softnic has no PCIe device.
func PrintTestInfo(w io.Writer, p *Params) {
	if !p.full() {
		return
	}
	var b strings.Builder
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(verbNames[p.Verb()] + " ")
	if p.Verb() == VerbAtomic {
		b.WriteString(p.Atomic.String() + " ")
	}
	if p.Test.IsBW() {
		if p.Duplex {
			b.WriteString("Bidirectional ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", p.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", p.NumQPs, "IB")
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", "RC", "OFF")
	fmt.Fprintf(&b, " PCIe relax order: %s\n", "Unsupported")
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", onOff(!p.UseOldPostSend))
	if !p.Server || p.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", p.TxDepth)
	}
	if p.Verb() == VerbSend && p.Server {
		fmt.Fprintf(&b, " RX depth        : %d\n", p.RxDepth)
	}
	if p.Test.IsBW() {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", p.MTU)
	fmt.Fprintf(&b, " Link type       : %s\n", "Ethernet")
	if p.GIDIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", p.GIDIndex)
	}
	if p.Verb() != VerbRead && p.Verb() != VerbAtomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", p.InlineSize)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", p.OutReads)
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : %s\n", onOff(p.RDMACM))
	method := "Ethernet"
	if p.RDMACM {
		method = "rdma_cm"
	}
	fmt.Fprintf(&b, " Data ex. method : %s", method)
	if p.RDMACM && p.Server {
		// perftest prints this after the client connected (the test info
		// comes after create_rdma_cm_connection).
		b.WriteString("\n" + ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n")
	b.WriteString(ResultLine)
	io.WriteString(w, b.String())
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// cHex formats v like C's printf("%#0*x", width, v): "0x" counts in the
// width, and zero prints without the prefix. Go's %#0Nx differs on both.
func cHex(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	prefix := ""
	if v != 0 {
		prefix = "0x"
	}
	if pad := width - len(prefix) - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	return prefix + digits
}

// PrintDest prints one QP's keys (ctx_print_pingpong_data): side is
// "local" or "remote". The GID bytes print in decimal (%02d), as perftest
// does.
func PrintDest(w io.Writer, p *Params, side string, d oob.PerftestDest) {
	if !p.full() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	switch p.Verb() {
	case VerbRead:
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(d.OutReads), 4))
		fallthrough
	case VerbWrite:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	b.WriteString("\n")
	if p.GIDIndex > -1 {
		b.WriteString(" GID: ")
		for i, g := range d.GID {
			if i > 0 {
				b.WriteString(":")
			}
			fmt.Fprintf(&b, "%02d", g)
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

// PrintBWHeader prints the bandwidth table's header line.
func PrintBWHeader(w io.Writer, p *Params) {
	if !p.full() {
		return
	}
	if p.ReportGbits {
		io.WriteString(w, ResultLine+resultFmtG+"\n")
	} else {
		io.WriteString(w, ResultLine+resultFmt+"\n")
	}
}

// PrintBWReport prints one bandwidth line (print_full_bw_report, without
// a remote report): REPORT_FMT, or REPORT_FMT_EXT with six decimals when
// reporting Gb/s below 0.1.
func PrintBWReport(w io.Writer, p *Params, r oob.BWReport) {
	switch p.Output {
	case OutputBandwidth:
		fmt.Fprintf(w, "%s\n", cf(r.BWAvg, 6))
		return
	case OutputMessageRate:
		fmt.Fprintf(w, "%s\n", cf(r.MsgRate, 6))
		return
	}
	if r.BWAvg < 0.1 && p.ReportGbits {
		fmt.Fprintf(w, " %-7d    %d           %-7s            %-7s            %-7s\n", r.Size, r.Iters, cf(r.BWPeak, 6), cf(r.BWAvg, 6), cf(r.MsgRate, 6))
		return
	}
	fmt.Fprintf(w, " %-7d    %-10d       %-7s            %-7s\t\t   %-7s\n", r.Size, r.Iters, cf(r.BWPeak, 2), cf(r.BWAvg, 2), cf(r.MsgRate, 6))
}

// PrintDuplexBWReport prints the line of a bidirectional run
// (print_full_bw_report with the remote report): the sums of both sides'
// peaks, averages and message rates, with this side's size and iterations;
// the six-decimal form is chosen by this side's own average.
func PrintDuplexBWReport(w io.Writer, p *Params, mine, theirs oob.BWReport) {
	sum := oob.BWReport{Size: mine.Size, Iters: mine.Iters, BWPeak: mine.BWPeak + theirs.BWPeak,
		BWAvg: mine.BWAvg + theirs.BWAvg, MsgRate: mine.MsgRate + theirs.MsgRate}
	switch {
	case p.Output != OutputFull:
		PrintBWReport(w, p, sum)
	case mine.BWAvg < 0.1 && p.ReportGbits:
		fmt.Fprintf(w, " %-7d    %d           %-7s            %-7s            %-7s\n", sum.Size, sum.Iters, cf(sum.BWPeak, 6), cf(sum.BWAvg, 6), cf(sum.MsgRate, 6))
	default:
		fmt.Fprintf(w, " %-7d    %-10d       %-7s            %-7s\t\t   %-7s\n", sum.Size, sum.Iters, cf(sum.BWPeak, 2), cf(sum.BWAvg, 2), cf(sum.MsgRate, 6))
	}
}

// PrintReportBoth prints the "Local results" and "Remote results" tables
// that --report-both adds after a bidirectional run (write_bw.c, read_bw.c
// and send_bw.c write "results: " with a space, atomic_bw.c without).
func PrintReportBoth(w io.Writer, p *Params, mine, theirs oob.BWReport) {
	if !p.full() {
		return
	}
	space := " "
	if p.Test == oob.AtomicBW {
		space = ""
	}
	for _, side := range []struct {
		name string
		rep  oob.BWReport
	}{{"Local", mine}, {"Remote", theirs}} {
		io.WriteString(w, ResultLine+"\n "+side.name+" results:"+space+"\n")
		PrintBWHeader(w, p)
		PrintBWReport(w, p, side.rep)
	}
}

// PrintLatHeader prints the latency table's header line (that of a
// duration run with -D).
func PrintLatHeader(w io.Writer, p *Params) {
	if !p.full() {
		return
	}
	if p.Duration > 0 {
		io.WriteString(w, ResultLine+resultFmtLatDur+"\n")
		return
	}
	io.WriteString(w, ResultLine+resultFmtLat+"\n")
}

// PrintLatReport prints one latency line (REPORT_FMT_LAT).
func PrintLatReport(w io.Writer, p *Params, r LatReport) {
	// print_report_lat: "#, usec" then "%d, %g" per sample, unsorted (-U)
	// and sorted (-H), then the table header again.
	for _, samples := range [][]float64{r.Unsorted, r.Sorted} {
		if samples == nil {
			continue
		}
		var b strings.Builder
		b.WriteString("#, usec\n")
		for i, v := range samples {
			fmt.Fprintf(&b, "%d, %s\n", i+1, strconv.FormatFloat(v, 'g', 6, 64))
		}
		io.WriteString(w, b.String())
	}
	if (r.Unsorted != nil || r.Sorted != nil) && p.full() {
		io.WriteString(w, ResultLine+resultFmtLat+"\n")
	}
	if p.Output == OutputLatency {
		fmt.Fprintf(w, "%s\n", cf(r.TAvg, 6))
		return
	}
	fmt.Fprintf(w, " %-7d %d          %-7s        %-7s      %-7s  \t       %-7s     \t%-7s\t\t%-7s \t\t%-7s\n",
		r.Size, r.Iters, cf(r.TMin, 2), cf(r.TMax, 2), cf(r.TTypical, 2), cf(r.TAvg, 2), cf(r.TStdev, 2), cf(r.P99, 2), cf(r.P999, 2))
}

// cf formats v like C's printf("%.<prec>f"), which glibc writes "inf",
// "-inf", "nan" or "-nan" for values that are not finite (a report from a
// peer whose clock calibration failed can hold them), where Go writes
// "+Inf" and "NaN".
func cf(v float64, prec int) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		if math.Signbit(v) {
			return "-nan"
		}
		return "nan"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// PrintLatDurReport prints a duration run's latency line
// (REPORT_FMT_LAT_DUR), or with --output=latency the average alone.
func PrintLatDurReport(w io.Writer, p *Params, r LatDurReport) {
	if p.Output == OutputLatency {
		fmt.Fprintf(w, "%s\n", cf(r.TAvg, 6))
		return
	}
	fmt.Fprintf(w, " %-7d       %d            %-7s        %-7s\n", r.Size, r.Iters, cf(r.TAvg, 2), cf(r.TPS, 2))
}
