#!/usr/bin/env bash
# The README's demo command: installs what the demo needs (demo/deps.sh:
# Debian/Ubuntu packages; Go is checked, not installed), then make demo.
# As root, or through sudo where it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "demo: run as root (namespaces, XDP)" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
export PATH=$PATH:/usr/local/go/bin
bash demo/deps.sh
exec make demo
