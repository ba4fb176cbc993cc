// Package xdplink is a roce.Link over AF_XDP sockets on a real Ethernet
// interface, and the facts about that interface a RoCE device needs (MTU,
// MAC, GID table, neighbours), read over netlink.
//
// Open attaches softnic's XDP program (package bpf), which steers RoCEv2
// frames for the device's addresses into one AF_XDP socket (package xdp) per
// receive queue and leaves all other traffic to the kernel. It sits apart
// from package roce so that roce, and the verbs API above it, need neither
// eBPF nor netlink: a program over another link does not link them in.
package xdplink
