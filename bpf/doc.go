// Package bpf holds softnic's XDP steering program and its Go bindings.
//
// The program (softnic.c) redirects IPv4 and IPv6 UDP frames with
// destination port 4791 (RoCEv2) and a destination address registered with
// AddAddr into the AF_XDP socket bound to the frame's receive queue
// (SetSocket). Everything else, including RoCEv2 frames on a queue without a
// socket, is passed to the kernel stack, which keeps handling ARP, ICMP, SSH
// and the rest. Per-CPU counters record each decision (Stats).
//
// Attach links the program to an interface with a bpf_link, so the program
// disappears with the last file descriptor: a killed process leaves nothing
// behind. The program is built for XDP multi-buffer ("xdp.frags") and so
// attaches to links with a 9000-byte MTU. ModeAuto attaches in native
// (driver) mode and falls back to generic XDP when the driver refuses the
// program; Program.Mode and Program.NativeError say what happened.
//
// The compiled objects (little- and big-endian) and bpf2go's Go files are
// committed; `go generate ./bpf` rebuilds them and needs clang (Debian's
// clang 14 works).
package bpf
