// Package middleware holds system tests of issue #33: the RDMA middleware
// that applications run on, as Debian 12 packages it, unmodified, between
// two `softnic daemon`s on the two ends of a veth pair in two network
// namespaces (internal/netnstest), as user nobody (uid 65534) with
// CAP_IPC_LOCK as RDMA hosts grant it, through `softnic exec`:
//
//   - UCX 1.13 (ucx-utils): `ucx_info -d`; `ucx_perftest` tag_bw, tag_lat,
//     ucp_put_bw and ucp_get over UCX_TLS=rc and ud_verbs;
//   - Open MPI 4.1 (openmpi-bin, libopenmpi-dev's mpicc): testdata/mpicheck.c,
//     which checks every byte of buffers of several sizes, over `pml ucx`
//     and over `pml cm` with `mtl ofi` on verbs;ofi_rxm, one rank in each
//     namespace (mpirun as root, its launcher agent testdata/rsh-agent.sh
//     entering the namespace and starting the orted as nobody) and two
//     ranks on one device as nobody;
//   - libfabric 1.17 (libfabric-bin): `fi_info -p 'verbs;ofi_rxm'`,
//     `fi_pingpong` over msg, rdm (verbs;ofi_rxm) and dgram endpoints;
//   - rdma-core's librdmacm programs (rdmacm-utils): rdma_xserver and
//     rdma_xclient -c r, rping to an address no host answers, cmtime with
//     10,000 connections (fewer where the hard RLIMIT_NOFILE would refuse
//     them over the kernel too); and rdma-core's own rdma_cm tests
//     (tests/test_rdmacm.py, python3-pyverbs), multicast ones included;
//     mckey between the two daemons, each way (issue #35); and the whole
//     of rdma-core's test suite (tests/, every module) on one daemon, as
//     root (TestRdmaCoreSuite).
//
// Each test checks from the daemons' counters (`softnic stat -j`) that the
// bytes went through softnic, not through TCP or shared memory, and,
// where the issue asks it, from `softnic stat res` that nothing is left.
//
// The tests run as root (they make namespaces, start daemons and change
// users); as another user, or with -short, they skip, and under CI they
// fail instead (netnstest.Need), as they do when a program is missing.
// Every case is short (few iterations, small sizes): all of them run in CI.
package middleware
