#!/usr/bin/env bash
# Installs what make demo needs besides Go: iproute2 for the namespaces,
# the C compiler, libibverbs-dev and librdmacm-dev for the provider (it
# includes infiniband/verbs.h and rdma/rdma_cma.h), and Debian's perftest
# for the stock ib_write_bw it runs on softnic, and ca-certificates
# for the go command's module downloads. Debian/Ubuntu, as root;
# does nothing when all are there, and elsewhere only says what is missing.
# Go is checked, not installed: the toolchain go.mod names is not in every
# distribution, so a missing or old one gets a message saying where to get it.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Go version go.mod asks for ("go 1.26.0" -> 1.26).
want=$(sed -n 's/^go \([0-9]*\.[0-9]*\).*/\1/p' go.mod)
go_help() {
	echo "demo: $1; softnic needs Go $want or newer." >&2
	echo "  Get the official tarball from https://go.dev/dl/ and unpack it:" >&2
	echo "    tar -C /usr/local -xzf go$want.*.linux-amd64.tar.gz; export PATH=\$PATH:/usr/local/go/bin" >&2
	echo "  or install your distribution's golang package if it is $want or newer (apt-cache policy golang-go)." >&2
	exit 1
}
# version_ge A B: A >= B for dotted versions.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
GO=${GO:-go}
command -v "$GO" >/dev/null || go_help "no go command on PATH"
have=$("$GO" env GOVERSION 2>/dev/null | sed 's/^go//')
# A go of 1.21 or newer fetches a newer toolchain itself when go.mod asks
# (GOTOOLCHAIN=auto); only an older one, or GOTOOLCHAIN=local, stops here.
toolchain=$("$GO" env GOTOOLCHAIN 2>/dev/null || echo local)
if ! version_ge "${have:-0}" "$want"; then
	if [ "$toolchain" = local ] || ! version_ge "${have:-0}" 1.21; then
		go_help "found go ${have:-of unknown version}"
	fi
	echo "demo: go $have will download Go $want itself (GOTOOLCHAIN=$toolchain; needs network)"
fi

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v cc >/dev/null || need+=(gcc)
# gcc only recommends the C library's headers, and apt is told to skip those.
[ -e /usr/include/errno.h ] || need+=(libc6-dev)
command -v make >/dev/null || need+=(make)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
[ -e /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v ib_write_bw >/dev/null || need+=(perftest)
# The go command fetches softnic's modules over https: it needs the CAs.
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
	echo "demo: please install ${need[*]} (or your distribution's names for them)" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "demo: missing ${need[*]}; run as root (make demo needs root anyway) or: sudo apt-get install ${need[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "demo: apt-get update (to install ${need[*]})"
apt-get update -qq
echo "demo: apt-get install ${need[*]}"
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "demo: installed ${need[*]}"
