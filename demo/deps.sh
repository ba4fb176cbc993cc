#!/usr/bin/env bash
# Installs what make demo needs besides Go: iproute2 for the namespaces,
# the C compiler and libibverbs-dev for the provider, and Debian's perftest
# for the stock ib_write_bw it runs on softnic. Debian/Ubuntu, as root;
# does nothing when all are there, and elsewhere only says what is missing.
set -euo pipefail
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v cc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
command -v ib_write_bw >/dev/null || need+=(perftest)
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
	echo "demo: please install ${need[*]} (or your distribution's names for them)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
