#!/usr/bin/env bash
# The README's test command: installs what the suite needs (test/deps.sh),
# then make test. As root, or through sudo where it is installed: the
# integration, system and interop tests need root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "test: run as root (namespaces, XDP, qemu)" >&2; exit 1; }
	exec sudo -E "$0" "$@"
fi
export PATH=$PATH:/usr/local/go/bin
bash test/deps.sh
exec make test
