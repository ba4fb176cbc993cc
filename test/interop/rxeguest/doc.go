// Package rxeguest runs a Linux rdma_rxe peer in a small qemu (TCG) virtual
// machine, for interoperability tests against a kernel RoCEv2 implementation
// on hosts whose own kernel has no InfiniBand support.
//
// Build assembles a kernel and an initramfs from Debian packages fetched with
// apt-get download and unpacked with dpkg -x: busybox, the kernel modules for
// rdma_rxe, virtio-net and sch_netem (in dependency order), rdma-core's
// libraries and tools, perftest and iproute2. The result is cached.
//
// NewNetwork creates a bridge with tap devices for guests and a veth pair
// whose far end sits in its own namespace for softnic, all inside dedicated
// network namespaces so that nothing touches the host's interfaces.
//
// Boot starts one guest on a tap, brings up rxe0 on its eth0, optionally
// applies netem loss/reordering on the guest side, runs a shell script and
// returns the script's output and exit status plus the serial console log.
package rxeguest
