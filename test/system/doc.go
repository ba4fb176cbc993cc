// Package system holds the system tests of the softnic binary: they build
// it (internal/systest) and run it as a tool, a daemon and `softnic exec`
// on the ends of veth pairs in network namespaces (internal/netnstest),
// with the C provider and softnic's librdmacm under Debian's own RDMA
// programs (ibverbs-utils, perftest, rdmacm-utils, qperf), test programs
// in C (testdata/*.c) and other users (uid 65534): data over AF_XDP, the
// daemon's sessions, faults, privileges and run directories, the capture,
// the counters under loss, congestion marks through a router, the
// /sys/class view. The binary's unit tests, which call package main's
// functions in process, stay beside it in cmd/softnic.
//
// The tests run as root; as another user, or with -short, they skip, and
// under CI they fail instead (netnstest.Need), as they do when a program
// is missing. The test binary also plays an unprivileged daemon client
// (TestMain, SOFTNIC_DAEMON_CLIENT).
package system
