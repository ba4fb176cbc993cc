#!/bin/sh
# Installs what the rxe-in-qemu interop harness needs on the host (Debian
# bookworm or later, as root). The guest's own packages (kernel, rdma-core,
# perftest, busybox, ...) are not installed: rxeguest.Build fetches them with
# apt-get download at test time and caches the image it makes from them.
set -eu

need=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
command -v tcpdump >/dev/null 2>&1 || need="$need tcpdump"
command -v dpkg-deb >/dev/null 2>&1 || need="$need dpkg"
command -v xz >/dev/null 2>&1 || need="$need xz-utils" # Debian 13's kernel modules

if [ -z "$need" ]; then
	echo "install-deps: qemu-system-x86_64, ip, tcpdump, dpkg-deb and xz already present"
else
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: needs root to apt-get install:$need" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086 # word splitting of the package list is wanted
	apt-get install -y -qq --no-install-recommends $need
fi

# rxeguest.Build resolves linux-image-amd64 through apt's package lists.
if ! apt-cache show linux-image-amd64 >/dev/null 2>&1; then
	apt-get update -qq
fi
