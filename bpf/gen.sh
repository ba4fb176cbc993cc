#!/bin/sh
# Compiles softnic.c for both byte orders and writes the Go bindings
# (softnic_bpfel.{go,o}, softnic_bpfeb.{go,o}); run by `go generate ./bpf`.
#
# clang -target bpf does not search Debian's multiarch include directory,
# where the kernel's asm/ headers live (/usr/include/x86_64-linux-gnu,
# /usr/include/aarch64-linux-gnu, ...), so name the host's. When neither
# clang nor dpkg knows it, add every such directory: for a BPF build their
# asm/ headers differ only in what softnic.c does not use.
set -eu
arch=$(clang -print-multiarch 2>/dev/null || true)
if [ -z "$arch" ]; then
	arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || true)
fi
includes=""
if [ -n "$arch" ] && [ -d "/usr/include/$arch" ]; then
	includes="-I/usr/include/$arch"
else
	for dir in /usr/include/*-linux-gnu*; do
		if [ -d "$dir" ]; then
			includes="$includes -I$dir"
		fi
	done
fi
exec go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror $includes" \
	-target bpfel,bpfeb -type counter -type flow_rule softnic softnic.c
