package perftest

import (
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// The golden strings follow the printf calls of perftest v4.5-0.17:
// ctx_print_test_info (src/perftest_parameters.c lines 3158-3299),
// ctx_print_pingpong_data (src/perftest_communication.c lines 1710-1754),
// print_full_bw_report (perftest_parameters.c lines 3556-3620) and
// print_report_lat (lines 3678-3793), with the format macros of
// perftest_parameters.h (RESULT_LINE line 194, RESULT_FMT 200-204,
// RESULT_FMT_LAT 212, REPORT_FMT 225-229, REPORT_FMT_LAT 246) and
// perftest_communication.h (BASIC_ADDR_FMT 86 to PERF_GID_FMT 99),
// expanded by hand.

func TestPrintTestInfoWriteBWClient(t *testing.T) {
	p := NewParams(oob.WriteBW)
	p.Device, p.MTU, p.GIDIndex = "veth0", 1024, 0
	require.NoError(t, p.Finish())
	want := ResultLine +
		"                    RDMA_Write BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : veth0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: Unsupported\n" +
		" ibv_wr* API     : ON\n" +
		" TX depth        : 128\n" +
		" CQ Moderation   : 1\n" + // 65536 > MSG_SIZE_CQ_MOD_LIMIT turns moderation off
		" Mtu             : 1024[B]\n" +
		" Link type       : Ethernet\n" +
		" GID index       : 0\n" +
		" Max inline data : 0[B]\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	var b bytes.Buffer
	PrintTestInfo(&b, &p)
	require.Equal(t, want, b.String())
}

func TestPrintTestInfoAtomicAndSendServer(t *testing.T) {
	p := NewParams(oob.AtomicBW)
	p.Device, p.MTU, p.GIDIndex, p.Atomic = "veth1", 4096, 1, CmpAndSwap
	p.Finish()
	var b bytes.Buffer
	PrintTestInfo(&b, &p)
	want := ResultLine +
		"                    Atomic CMP_AND_SWAP BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : veth1\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: Unsupported\n" +
		" ibv_wr* API     : ON\n" +
		" TX depth        : 128\n" +
		" CQ Moderation   : 100\n" +
		" Mtu             : 4096[B]\n" +
		" Link type       : Ethernet\n" +
		" GID index       : 1\n" +
		" Outstand reads  : 16\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	require.Equal(t, want, b.String())

	s := NewParams(oob.SendLat)
	s.Server, s.Device, s.MTU, s.GIDIndex = true, "eth0", 1024, -1
	s.Finish()
	b.Reset()
	PrintTestInfo(&b, &s)
	want = ResultLine +
		"                    Send Latency Test\n" +
		" Dual-port       : OFF\t\tDevice         : eth0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: Unsupported\n" +
		" ibv_wr* API     : ON\n" +
		" RX depth        : 512\n" +
		" Mtu             : 1024[B]\n" +
		" Link type       : Ethernet\n" +
		" Max inline data : 236[B]\n" + // DEF_INLINE_SEND_RC_UC_XRC, as on ConnectX

		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	require.Equal(t, want, b.String())
}

func TestPrintDest(t *testing.T) {
	d := oob.PerftestDest{OutReads: 16, QPN: 0x11, PSN: 0x7f1a4b, RKey: 0x1234, VAddr: 0x7f8ab7f41000,
		GID: netip.MustParseAddr("::ffff:10.0.0.1").As16()}
	gid := " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01\n"
	for _, tc := range []struct {
		test oob.Test
		want string
	}{
		// BASIC_ADDR_FMT " %s address: LID %#04x QPN %#06x PSN %#06x",
		// RDMA_FMT " RKey %#08x VAddr %#016llx", READ_FMT " OUT %#04x",
		// PERF_GID_FMT with %02d per byte.
		{oob.WriteBW, " local address: LID 0000 QPN 0x0011 PSN 0x7f1a4b RKey 0x001234 VAddr 0x007f8ab7f41000\n" + gid},
		{oob.ReadLat, " local address: LID 0000 QPN 0x0011 PSN 0x7f1a4b OUT 0x10 RKey 0x001234 VAddr 0x007f8ab7f41000\n" + gid},
		{oob.SendBW, " local address: LID 0000 QPN 0x0011 PSN 0x7f1a4b\n" + gid},
		{oob.AtomicBW, " local address: LID 0000 QPN 0x0011 PSN 0x7f1a4b\n" + gid},
	} {
		p := NewParams(tc.test)
		p.GIDIndex = 0
		var b bytes.Buffer
		PrintDest(&b, &p, "local", d)
		assert.Equal(t, tc.want, b.String(), tc.test.String())
	}
}

func TestCHex(t *testing.T) {
	for _, tc := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x11, 6, "0x0011"}, {0x7f1a4b, 6, "0x7f1a4b"}, {0x12345678, 8, "0x12345678"}, {1, 4, "0x01"}} {
		assert.Equal(t, tc.want, cHex(tc.v, tc.width), "cHex(%#x, %d)", tc.v, tc.width)
	}
}

func TestPrintBW(t *testing.T) {
	p := NewParams(oob.WriteBW)
	var b bytes.Buffer
	PrintBWHeader(&b, &p)
	PrintBWReport(&b, &p, oob.BWReport{Size: 65536, Iters: 5000, BWPeak: 1100.5, BWAvg: 1095.25, MsgRate: 0.0175244})
	// REPORT_FMT " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf" and REPORT_EXT "\n".
	want := ResultLine +
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 65536  " + "    " + "5000      " + "       " + "1100.50" + "            " + "1095.25" + "\t\t   " + "0.017524" + "\n"
	require.Equal(t, want, b.String())
	p.ReportGbits = true
	b.Reset()
	PrintBWHeader(&b, &p)
	PrintBWReport(&b, &p, oob.BWReport{Size: 2, Iters: 1000, BWPeak: 0.0123456, BWAvg: 0.01, MsgRate: 0.625})
	// Below 0.1 Gb/s: REPORT_FMT_EXT " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf".
	want = ResultLine +
		" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n" +
		" 2      " + "    " + "1000" + "           " + "0.012346" + "            " + "0.010000" + "            " + "0.625000" + "\n"
	require.Equal(t, want, b.String())
}

func TestPrintLat(t *testing.T) {
	var b bytes.Buffer
	p := NewParams(oob.WriteLat)
	PrintLatHeader(&b, &p)
	PrintLatReport(&b, &p, LatReport{Size: 2, Iters: 1000, TMin: 1.5, TMax: 10, TTypical: 2.25, TAvg: 2.5, TStdev: 0.5, P99: 5, P999: 10})
	// RESULT_FMT_LAT + RESULT_EXT; REPORT_FMT_LAT
	// " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f".
	want := ResultLine +
		" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 2      " + " 1000" + "          " + "1.50   " + "        " + "10.00  " + "      " + "2.25   " + "  \t       " +
		"2.50   " + "     \t" + "0.50   " + "\t\t" + "5.00   " + " \t\t" + "10.00  " + "\n"
	require.Equal(t, want, b.String())
}

func TestBWReportFigures(t *testing.T) {
	p := NewParams(oob.WriteBW)
	p.CQMod = 1
	size := uint64(1 << 20)
	tm := BWTimes{Posted: []int64{0, 1000, 2000, 3000}, Completed: []int64{1000, 2000, 3000, 8000}}
	r := BWReport(&p, size, 4, tm)
	// Average: 4 MiB in 8 us = 500000 MiB/s; peak: one MiB in 1 us.
	require.Equal(t, oob.BWReport{Size: size, Iters: 4, BWPeak: 1e6, BWAvg: 500000, MsgRate: 0.5}, r)
	p.ReportGbits = true
	require.InDelta(t, float64(4*size)*8/8000, BWReport(&p, size, 4, tm).BWAvg, 1e-9, "Gb/s average")
	// With moderation only every second completion carries a time.
	p.ReportGbits, p.CQMod = false, 2
	tm = BWTimes{Posted: []int64{0, 1000, 2000, 3000}, Completed: []int64{0, 4000, 0, 6000}}
	r = BWReport(&p, size, 4, tm)
	// Stretches end at the moderated completions 1 and 3 only; the best
	// is posts 0..3: 6000/4 = 1500 ns a message, better than 2..3 (2000).
	require.Equal(t, 1e9/1500.0, r.BWPeak, "moderated report %+v", r)
	require.Equal(t, float64(4)*1e9/6000, r.BWAvg, "moderated report %+v", r)
	p.NoPeak = true
	r = BWReport(&p, size, 4, BWTimes{Posted: []int64{100}, Completed: []int64{4100}})
	require.Zero(t, r.BWPeak, "no-peak report %+v", r)
	require.Equal(t, 1e6, r.BWAvg, "no-peak report %+v", r)
}

func TestLatencyReportFigures(t *testing.T) {
	p := NewParams(oob.ReadLat)
	gaps := []int64{10, 2000, 30, 40, 1000, 20, 50} // microseconds
	posted := []int64{0}
	for _, g := range gaps {
		posted = append(posted, posted[len(posted)-1]+g*1000)
	}
	r := LatencyReport(&p, 2, posted)
	// Sorted 10 20 30 40 50 | 1000 2000: five kept, median 30, average 30,
	// deviations 20 10 0 10 20, t_max and both percentiles the sixth.
	want := LatReport{Size: 2, Iters: 8, TMin: 10, TMax: 1000, TTypical: 30, TAvg: 30, TStdev: math.Sqrt(200), P99: 1000, P999: 1000}
	require.Equal(t, want, r)
	w := NewParams(oob.WriteLat) // write latency is half the round trip
	r = LatencyReport(&w, 2, posted)
	require.Equal(t, 15.0, r.TTypical, "write latency %+v", r)
	require.Equal(t, 5.0, r.TMin, "write latency %+v", r)
}

func TestPrintSingleFigure(t *testing.T) {
	p := NewParams(oob.WriteBW)
	p.Output = OutputBandwidth
	var b bytes.Buffer
	PrintWaiting(&b, &p)
	PrintTestInfo(&b, &p)
	PrintDest(&b, &p, "local", oob.PerftestDest{})
	PrintBWHeader(&b, &p)
	PrintBWReport(&b, &p, oob.BWReport{Size: 2, Iters: 5, BWPeak: 3, BWAvg: 1234.5, MsgRate: 0.25})
	PrintEnd(&b, &p)
	// print_full_bw_report: printf("%lf\n", bw_avg) and nothing else.
	require.Equal(t, "1234.500000\n", b.String())
	p.Output = OutputMessageRate
	b.Reset()
	PrintBWReport(&b, &p, oob.BWReport{MsgRate: 0.25})
	require.Equal(t, "0.250000\n", b.String())
	l := NewParams(oob.SendLat)
	l.Output = OutputLatency
	b.Reset()
	PrintLatHeader(&b, &l)
	PrintLatReport(&b, &l, LatReport{TAvg: 2.5, TMin: 1})
	require.Equal(t, "2.500000\n", b.String())
	require.NoError(t, l.Finish())
	p.Output = OutputLatency
	require.Error(t, p.Finish(), "--output=latency accepted for a bandwidth test")
}

func TestNonFiniteLikeGlibc(t *testing.T) {
	p := NewParams(oob.WriteBW)
	var b bytes.Buffer
	PrintBWReport(&b, &p, oob.BWReport{Size: 65536, Iters: 50, BWPeak: math.Inf(1), BWAvg: math.NaN(), MsgRate: math.Copysign(math.NaN(), -1)})
	want := " 65536  " + "    " + "50        " + "       " + "inf    " + "            " + "nan    " + "\t\t   " + "-nan   " + "\n"
	require.Equal(t, want, b.String())
	require.Equal(t, fmt.Sprintf("%.2f", -1.005), cf(-1.005, 2), "finite values must print as Printf does")
	require.Equal(t, "0.017524", cf(0.0175244, 6), "finite values must print as Printf does")
}

func TestLatencySamples(t *testing.T) {
	p := NewParams(oob.ReadLat)
	p.ReportUnsorted, p.ReportHistogram = true, true
	posted := []int64{0, 3000, 4000, 6500, 6600, 1006600, 1006700}
	r := LatencyReport(&p, 2, posted)
	var b bytes.Buffer
	PrintLatReport(&b, &p, r)
	// Samples 3 1 2.5 0.1 1000 0.1 usec; sorted and without the two
	// largest: 0.1 0.1 1 2.5. %g prints 6 significant digits.
	want := "#, usec\n1, 3\n2, 1\n3, 2.5\n4, 0.1\n5, 1000\n6, 0.1\n" +
		"#, usec\n1, 0.1\n2, 0.1\n3, 1\n4, 2.5\n" +
		ResultLine + resultFmtLat + "\n"
	require.True(t, strings.HasPrefix(b.String(), want), "got %q\nwant prefix %q", b.String(), want)
	require.Equal(t, fmt.Sprintf("%.6g", 1234567.0), strconv.FormatFloat(1234567, 'g', 6, 64), "g formatting differs from C printf")
	require.Equal(t, "1.25e-05", strconv.FormatFloat(0.0000125, 'g', 6, 64), "g formatting differs from C printf")
}

func TestPrintDuplex(t *testing.T) {
	p := NewParams(oob.ReadBW)
	p.Server, p.Duplex, p.Device, p.MTU, p.GIDIndex = true, true, "veth0", 1024, 0
	p.Finish()
	var b bytes.Buffer
	PrintTestInfo(&b, &p)
	// "Bidirectional " after the verb; a duplex server prints its TX depth.
	require.Contains(t, b.String(), "                    RDMA_Read Bidirectional BW Test\n")
	require.Contains(t, b.String(), " TX depth        : 128\n")
	b.Reset()
	PrintDuplexBWReport(&b, &p, oob.BWReport{Size: 65536, Iters: 1000, BWPeak: 100, BWAvg: 90, MsgRate: 0.0014},
		oob.BWReport{Size: 65536, Iters: 1000, BWPeak: 110, BWAvg: 95.5, MsgRate: 0.0015})
	want := " 65536  " + "    " + "1000      " + "       " + "210.00 " + "            " + "185.50 " + "\t\t   " + "0.002900" + "\n"
	require.Equal(t, want, b.String())
	s := NewParams(oob.SendLat)
	s.Duplex = true
	require.Error(t, s.Finish(), "bidirectional send_lat accepted")
}

func TestBestGIDIndex(t *testing.T) {
	g := func(s string) verbs.GID { return netip.MustParseAddr(s).As16() }
	ll, v4, v4b, v6 := g("fe80::1"), g("::ffff:10.0.0.1"), g("::ffff:10.0.0.2"), g("fd00::1")
	for _, tc := range []struct {
		gids []verbs.GID
		ipv6 bool
		want int
	}{
		{[]verbs.GID{ll, v4, v6}, false, 1},
		{[]verbs.GID{ll, v4, v6}, true, 0},
		{[]verbs.GID{v4, v4b, v6}, false, 0},
		{[]verbs.GID{v4, v4b, v6}, true, 2},
		{[]verbs.GID{ll, v6}, false, 0},
		{nil, false, 0},
	} {
		assert.Equal(t, tc.want, BestGIDIndex(tc.gids, tc.ipv6), "BestGIDIndex(%v, ipv6 %v)", tc.gids, tc.ipv6)
	}
}

func TestPrintReportBoth(t *testing.T) {
	mine := oob.BWReport{Size: 8, Iters: 100, BWPeak: 1, BWAvg: 0.5, MsgRate: 0.1}
	theirs := oob.BWReport{Size: 8, Iters: 100, BWPeak: 2, BWAvg: 1.5, MsgRate: 0.2}
	line := func(r oob.BWReport) string {
		var b bytes.Buffer
		p := NewParams(oob.WriteBW)
		PrintBWReport(&b, &p, r)
		return b.String()
	}
	header := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	for test, label := range map[oob.Test]string{oob.WriteBW: "results: \n", oob.AtomicBW: "results:\n"} {
		p := NewParams(test)
		var b bytes.Buffer
		PrintReportBoth(&b, &p, mine, theirs)
		want := ResultLine + "\n Local " + label + ResultLine + header + line(mine) +
			ResultLine + "\n Remote " + label + ResultLine + header + line(theirs)
		assert.Equal(t, want, b.String(), test.String())
	}
}

func TestOddRxDepthRoundsUp(t *testing.T) {
	p := NewParams(oob.SendBW)
	p.Server, p.Iters = true, 51
	p.Finish()
	// rx_depth is capped to the 51 iterations, then made even.
	require.Equal(t, 52, p.RxDepth)
	p = NewParams(oob.SendBW)
	p.Iters, p.RunAll = 51, true
	p.Finish()
	require.Equal(t, 51, p.RxDepth, "RX depth with -a")
}

func TestPrintLatDuration(t *testing.T) {
	p := NewParams(oob.SendLat)
	p.Duration = 5 * time.Second
	var b bytes.Buffer
	PrintLatHeader(&b, &p)
	r := LatencyDurationReport(&p, 2, BWTimes{Posted: []int64{1e9}, Completed: []int64{4e9}, Messages: 1000})
	// 3 s for 1000 round trips: 1500 us one way, 333.33 per second.
	PrintLatDurReport(&b, &p, r)
	// RESULT_FMT_LAT_DUR and REPORT_FMT_LAT_DUR " %-7lu       %lu            %-7.2f        %-7.2f".
	want := ResultLine + " #bytes        #iterations       t_avg[usec]    tps average\n" +
		" 2      " + "       " + "1000" + "            " + "1500.00" + "        " + "333.33 " + "\n"
	require.Equal(t, want, b.String())
}
