// Command suite is softnic's side-by-side benchmark (make bench): in one run
// it measures
//
//   - the ceiling: the raw AF_XDP frame blast (bench/xdpblast) at the frame
//     sizes softnic sends: a full IB MTU 4096 packet on a 9000-byte link, an
//     IB MTU 1024 packet on a 1500-byte link, and the frame of a 64-byte
//     RDMA WRITE; and the raw AF_XDP ping-pong (xdpblast -pingpong) of an
//     8-byte WRITE's frame, half round trip, the latency ceiling;
//   - what users would pick instead: one kernel TCP stream (iperf3) and a
//     kernel UDP ping-pong (half round trip) over the same kind of veth;
//   - softnic: `softnic perf` bandwidth, latency and message rate tests
//     between two network namespaces, aggregate bandwidth over many QPs,
//     and the memory an idle connected QP costs (in-process); write_bw
//     through `softnic daemon` against in-process (daemon.go), and with
//     `--pcap` against without (capture.go);
//   - the middleware (middleware.go): Debian's ucx_perftest tag_bw 64 KiB
//     and tag_lat 8 B over UCX_TLS=rc and an MPI ping-pong through Open
//     MPI's pml ucx, through `softnic daemon`, in rounds with softnic perf
//     write_bw and write_lat in-process;
//   - rsockets (rsockets.go): Debian's rstream 64 KiB through `softnic
//     daemon` against softnic perf send_bw in-process, and iperf3 under
//     librspreload against iperf3 over the kernel's TCP on the same link.
//
// It prints one table with every figure, its ratio to the ceiling and to
// the kernel, and the targets, and writes the table (markdown) and
// a PNG chart under bench/results: latest.md and latest.png.
// A figure that cannot be measured shows the error in its cell. Bandwidth,
// ceiling and TCP figures are the median of -repeat runs (default 5), each
// sized by a probe run to last about -duration; -repeat 5 keeps the run
// around 3-4 minutes. Latencies are one run each of many round trips.
//
// An in-process part runs both perftest sides in this process over AF_XDP
// (the engine and link code of `softnic perf`) to count allocations per
// packet, TX kicks per frame and retransmissions, and writes CPU profiles
// (cpu-write_bw.pprof, cpu-write_bw_64B.pprof, cpu-write_bw_1024qp.pprof,
// cpu-write_bw_mtu1024.pprof, cpu-write_lat.pprof) and a heap profile of
// idle QPs (heap-idle-qps.pprof) to -profile-dir, a temporary directory
// unless set: they are for `go tool pprof`, not for the repository.
//
//	make bench                                 # everything, about 3-4 minutes
//	bin/benchsuite -only lat,udp,xdplat -out "" # some parts, no files written
//
// With -vm (make bench-vm) it instead compares softnic with Linux
// rdma_rxe on two identical qemu TCG guests on a bridge (rxeguest's image,
// a static softnic build in it): for each guest shape of -vm-shapes
// (vCPUs:virtio-net queue pairs) it boots the pair once and the guests'
// scripts run rxe's and softnic's write_bw 64 KiB, write_lat 8 B and 64 B
// message rate in -vm-rounds rounds, the two taking turns (vmscript.go).
// It records the XDP mode softnic got on eth0 and each run's CPU split,
// and writes vm.md and vm.png.
//
// It needs root (namespaces, XDP, AF_XDP). Figures are only comparable
// within one run: the machine is shared and noisy, which is why every
// target is a ratio to a baseline measured minutes apart in the same run.
package main
