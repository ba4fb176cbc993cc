#!/usr/bin/env bash
# Installs what make test runs besides Go (Debian/Ubuntu, as root; does
# nothing when all are there): the demo's packages and the Go check
# (demo/deps.sh), the interop harness's host tools
# (test/interop/install-deps.sh), and the stock programs the system and
# middleware tests run on softnic: Debian's perftest, ibverbs-utils,
# rdmacm-utils and qperf; UCX, Open MPI with mpicc, libfabric; rdma-core's
# rdma_cm tests (python3-pyverbs); tshark and nftables for the capture and
# loss tests; clang, llvm and libbpf-dev for the XDP program's build; iperf3
# and nc under librspreload; dpkg-dev for make deb.
set -euo pipefail
cd "$(dirname "$0")/.."
bash demo/deps.sh
bash test/interop/install-deps.sh
need=()
for pkg in iproute2 iputils-ping procps tshark nftables clang llvm libbpf-dev gcc make libibverbs-dev librdmacm-dev \
	ibverbs-utils perftest rdmacm-utils qperf ucx-utils openmpi-bin libopenmpi-dev libfabric-bin python3-pyverbs \
	iperf3 netcat-openbsd dpkg-dev util-linux coreutils gzip; do
	dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
export DEBIAN_FRONTEND=noninteractive
echo "test: apt-get update (to install ${need[*]})"
apt-get update -qq
echo "test: apt-get install ${need[*]}"
apt-get install -y -qq "${need[@]}" >/dev/null
echo "test: installed ${need[*]}"
