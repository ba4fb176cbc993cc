#!/usr/bin/env bash
# Installs what make bench runs besides the project's own binaries: iperf3
# for the kernel TCP figure and iproute2 for the namespaces. Debian/Ubuntu,
# as root; does nothing when both are there.
set -euo pipefail
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ip >/dev/null || need+=(iproute2)
[ ${#need[@]} -eq 0 ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
