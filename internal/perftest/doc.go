// Package perftest runs perftest's RDMA tests (write_bw, read_bw, send_bw,
// atomic_bw, write_lat, read_lat, send_lat) on softnic's verbs, speaking
// perftest 4.5's out-of-band exchange (protocol version 6.06, package
// internal/oob) so either end can be the real ib_*_bw / ib_*_lat, and
// prints results in perftest's exact layout, so numbers compare directly
// with ConnectX runs.
//
// Run is the program: given an opened Device and the TCP connection, it
// negotiates (versions, system data, MTU), creates the buffer, CQs and QPs
// as perftest's ctx_init does, exchanges keys, connects the QPs with
// perftest's attributes (GRH hop limit 255, min RNR timer 12, timeout 14,
// retry and RNR retry 7, out_reads both ways), runs the test loops of
// perftest_resources.c (run_iter_bw, run_iter_bw_server, run_iter_lat_write,
// run_iter_lat, run_iter_lat_send) and prints the figures.
//
// The printers (PrintTestInfo, PrintDest, PrintBWReport, PrintLatReport...)
// are pure functions of Params and result structs; the figures are computed
// as print_report_bw and print_report_lat in perftest_parameters.c do, from
// nanosecond timestamps instead of CPU cycles (so softnic needs no clock
// calibration and ignores -F).
//
// Differences a user may notice: the header says "PCIe relax order:
// Unsupported" (softnic has no PCIe device; perftest built without HAVE_RO
// prints the same); there is one port, RC only, no RDMA CM, and a duration
// run (-D) cannot be bidirectional (-b). write_lat reads its buffer for the
// peer's RDMA WRITE only after the region's remote-write sequence moved
// (awaitWrite), so it does not race the transport's copy.
package perftest
