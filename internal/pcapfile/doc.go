// Package pcapfile reads and writes packet capture files: classic libpcap
// files (either byte order, micro- or nanosecond timestamps) and pcapng
// files (section headers of either byte order, interface descriptions,
// enhanced and simple packet blocks). It is what `softnic inspect` reads
// and what the tests use to load golden captures.
//
// Only Ethernet link types are of interest to softnic; the reader reports
// each packet's link type and leaves the choice to the caller.
package pcapfile
