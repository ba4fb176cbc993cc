#!/usr/bin/env bash
# Installs what make bench runs besides the project's own binaries: iperf3
# for the kernel TCP figure, iproute2 for the namespaces, clang for the
# congestion part's BPF marker, and Debian's
# perftest, ibverbs-utils and libibverbs-dev for the stock programs on the
# C provider, and UCX and Open MPI for the middleware part. Debian/Ubuntu, as root; does nothing when all are there.
set -euo pipefail
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ip >/dev/null || need+=(iproute2)
# Stock perftest and the provider's build, for the libibverbs figures.
command -v ib_write_bw >/dev/null || need+=(perftest)
command -v ibv_devinfo >/dev/null || need+=(ibverbs-utils)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
[ -e /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v cc >/dev/null || need+=(gcc)
# clang compiles bench-dcqcn's BPF marker (bench/suite/phantom) at run time.
command -v clang >/dev/null || need+=(clang)
command -v tc >/dev/null || need+=(iproute2)
# The middleware part: ucx_perftest, mpirun and mpicc.
command -v ucx_perftest >/dev/null || need+=(ucx-utils)
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
# The rsockets part: rstream, and librspreload under iperf3.
command -v rstream >/dev/null || need+=(rdmacm-utils)
[ ${#need[@]} -eq 0 ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
