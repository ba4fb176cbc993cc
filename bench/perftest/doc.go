// Package perftest runs perftest's RDMA tests (write_bw, read_bw, send_bw,
// atomic_bw, write_lat, read_lat, send_lat) on softnic's verbs, speaking
// perftest 4.5's out-of-band exchange (package internal/oob) so either end
// can be the real ib_*_bw / ib_*_lat, and prints results in perftest's
// exact layout, so numbers compare directly with ConnectX runs.
//
// The printers are pure functions of Params and result structs; the
// figures are computed as perftest computes them (print_report_bw,
// print_report_lat in perftest_parameters.c), from nanosecond timestamps
// instead of CPU cycles.
package perftest
