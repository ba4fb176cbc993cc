//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// softnic XDP steering program.
//
// RoCEv2 frames (UDP destination port 4791) addressed to an IP address that
// softnic owns are redirected into the AF_XDP socket bound to the receive
// queue they arrived on. Every other frame, and RoCEv2 frames on a queue
// without a bound socket, go to the kernel stack unchanged (XDP_PASS), so
// ARP, ICMP, SSH and the rest keep working.
//
// The program is loaded from section "xdp.frags" so it may be attached to
// links whose MTU needs multi-buffer XDP (e.g. 9000 bytes for IB MTU 4096).
// Only the headers are read, and they always sit in the linear part.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ROCE_UDP_PORT 4791
#define MAX_QUEUES 256
#define MAX_ADDRS 64

// Counter indexes of the per-CPU "counters" array; mirrored in Go.
enum counter {
	COUNTER_STEERED = 0,     // redirected into an AF_XDP socket
	COUNTER_PASS_NOT_ROCE,   // not IPv4/IPv6 UDP to port 4791
	COUNTER_PASS_NOT_LOCAL,  // RoCEv2, but the destination address is not softnic's
	COUNTER_PASS_NO_SOCKET,  // RoCEv2 for softnic, but no socket on this queue
	COUNTER_PASS_FRAGMENT,   // IPv4 fragment or IPv6 extension header: left to the kernel
	COUNTER_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// IPv4 destination addresses owned by softnic (network byte order).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRS);
	__type(key, __u32);
	__type(value, __u8);
} local_v4 SEC(".maps");

struct in6_key {
	__u8 addr[16];
};

// IPv6 destination addresses owned by softnic.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRS);
	__type(key, struct in6_key);
	__type(value, __u8);
} local_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, enum counter);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(enum counter c, int action)
{
	enum counter key = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);

	if (v)
		(*v)++;
	return action;
}

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

SEC("xdp.frags")
int softnic_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u16 proto;
	void *l3;

	if ((void *)(eth + 1) > data_end)
		return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
	proto = eth->h_proto;
	l3 = eth + 1;
	// At most one 802.1Q / 802.1ad tag.
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = l3;

		if ((void *)(vh + 1) > data_end)
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		proto = vh->proto;
		l3 = vh + 1;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		__u32 daddr;

		if ((void *)(ip + 1) > data_end || ip->protocol != IPPROTO_UDP)
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		if (ip->ihl < 5)
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		// Fragments (MF set or non-zero offset) are reassembled by the kernel.
		if (ip->frag_off & bpf_htons(0x3fff))
			return count(COUNTER_PASS_FRAGMENT, XDP_PASS);
		udp = (void *)ip + ip->ihl * 4;
		if ((void *)(udp + 1) > data_end || udp->dest != bpf_htons(ROCE_UDP_PORT))
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		daddr = ip->daddr;
		if (!bpf_map_lookup_elem(&local_v4, &daddr))
			return count(COUNTER_PASS_NOT_LOCAL, XDP_PASS);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		struct in6_key key;

		if ((void *)(ip6 + 1) > data_end)
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		if (ip6->nexthdr != IPPROTO_UDP) {
			// RoCEv2 never uses extension headers; a fragment header
			// still gets its own counter so it is visible.
			if (ip6->nexthdr == IPPROTO_FRAGMENT)
				return count(COUNTER_PASS_FRAGMENT, XDP_PASS);
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		}
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > data_end || udp->dest != bpf_htons(ROCE_UDP_PORT))
			return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
		__builtin_memcpy(key.addr, &ip6->daddr, sizeof(key.addr));
		if (!bpf_map_lookup_elem(&local_v6, &key))
			return count(COUNTER_PASS_NOT_LOCAL, XDP_PASS);
	} else {
		return count(COUNTER_PASS_NOT_ROCE, XDP_PASS);
	}

	// Only redirect when a socket is bound on this queue: the lookup makes
	// the decision visible in the counters, and the XDP_PASS flag covers
	// the race with a socket being removed between lookup and redirect.
	__u32 queue = ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks, &queue))
		return count(COUNTER_PASS_NO_SOCKET, XDP_PASS);
	count(COUNTER_STEERED, XDP_PASS);
	return bpf_redirect_map(&xsks, queue, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
