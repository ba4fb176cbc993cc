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
// Frames that match a flow rule (flow_rules, which the Go side fills from
// the flows of raw packet QPs, ibv_create_flow) are redirected too: a rule
// is a superset of its flow (destination MAC, EtherType, IP addresses and
// protocol, TCP/UDP ports, each under a mask), and softnic matches the
// flow itself, exactly.
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
#define MAX_FLOW_RULES 64

// Counter indexes of the per-CPU "counters" array; mirrored in Go.
enum counter {
	COUNTER_STEERED = 0,     // redirected into an AF_XDP socket
	COUNTER_PASS_NOT_ROCE,   // not IPv4/IPv6 UDP to port 4791
	COUNTER_PASS_NOT_LOCAL,  // RoCEv2, but the destination address is not softnic's
	COUNTER_PASS_NO_SOCKET,  // RoCEv2 for softnic, but no socket on this queue
	COUNTER_PASS_FRAGMENT,   // IPv4 fragment or IPv6 extension header: left to the kernel
	COUNTER_STEERED_FLOW,    // a flow rule's: redirected into an AF_XDP socket
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

// A flow rule: a frame matches when every field, masked, equals the
// rule's value masked. Addresses are bytes as on the wire (IPv4 in the
// first 4 of 16), ports the first 4 bytes of the TCP/UDP header.
struct flow_rule {
	__u8 dst[8], dst_mask[8];
	__u8 src_ip[16], src_ip_mask[16];
	__u8 dst_ip[16], dst_ip_mask[16];
	__u8 ports[4], ports_mask[4];
	__u16 ether_type, ether_type_mask; // network byte order
	__u8 proto, proto_mask;
	__u8 need_ports; // the rule looks at ports: the frame must have them
	__u8 ip_version; // 0: any frame; 4 or 6: that IP's only
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_FLOW_RULES);
	__type(key, __u32);
	__type(value, struct flow_rule);
} flow_rules SEC(".maps");

// flow_count[0] is how many of flow_rules are in force.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} flow_count SEC(".maps");

// flow_key is what the rules look at in a frame, laid out as a rule.
struct flow_key {
	__u8 dst[8];
	__u8 src_ip[16];
	__u8 dst_ip[16];
	__u8 ports[4];
	__u16 ether_type;
	__u8 proto, has_ports, ip_version;
} __attribute__((aligned(8)));

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

static __always_inline int masked_eq64(const void *a, const void *v, const void *m)
{
	return ((*(const __u64 *)a ^ *(const __u64 *)v) & *(const __u64 *)m) == 0;
}

static __always_inline int rule_matches(const struct flow_rule *r, const struct flow_key *k)
{
	if (r->ip_version && r->ip_version != k->ip_version)
		return 0;
	if (r->need_ports && !k->has_ports)
		return 0;
	if ((k->ether_type ^ r->ether_type) & r->ether_type_mask)
		return 0;
	if ((k->proto ^ r->proto) & r->proto_mask)
		return 0;
	if ((*(const __u32 *)k->ports ^ *(const __u32 *)r->ports) & *(const __u32 *)r->ports_mask)
		return 0;
	return masked_eq64(k->dst, r->dst, r->dst_mask) && masked_eq64(k->src_ip, r->src_ip, r->src_ip_mask) &&
	       masked_eq64(k->src_ip + 8, r->src_ip + 8, r->src_ip_mask + 8) &&
	       masked_eq64(k->dst_ip, r->dst_ip, r->dst_ip_mask) &&
	       masked_eq64(k->dst_ip + 8, r->dst_ip + 8, r->dst_ip_mask + 8);
}

// flow_key_of reads the frame's headers into k (what it has of them).
static __always_inline void flow_key_of(void *data, void *data_end, struct flow_key *k)
{
	struct ethhdr *eth = data;
	void *l3, *l4 = 0;
	__u16 proto;

	if ((void *)(eth + 1) > data_end)
		return;
	__builtin_memcpy(k->dst, eth->h_dest, 6);
	proto = eth->h_proto;
	l3 = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = l3;

		if ((void *)(vh + 1) > data_end)
			return;
		proto = vh->proto;
		l3 = vh + 1;
	}
	k->ether_type = proto;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return;
		k->ip_version = 4;
		k->proto = ip->protocol;
		__builtin_memcpy(k->src_ip, &ip->saddr, 4);
		__builtin_memcpy(k->dst_ip, &ip->daddr, 4);
		if (ip->ihl >= 5 && !(ip->frag_off & bpf_htons(0x1fff)))
			l4 = (void *)ip + ip->ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return;
		k->ip_version = 6;
		k->proto = ip6->nexthdr;
		__builtin_memcpy(k->src_ip, &ip6->saddr, 16);
		__builtin_memcpy(k->dst_ip, &ip6->daddr, 16);
		l4 = ip6 + 1;
	}
	if (l4 && (k->proto == IPPROTO_TCP || k->proto == IPPROTO_UDP) && l4 + 4 <= data_end) {
		__builtin_memcpy(k->ports, l4, 4);
		k->has_ports = 1;
	}
}

// flow_steered reports whether a flow rule takes the frame.
static __always_inline int flow_steered(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&flow_count, &zero);
	struct flow_key k = {};

	if (!n || *n == 0)
		return 0;
	__u32 limit = *n;
	flow_key_of((void *)(long)ctx->data, (void *)(long)ctx->data_end, &k);
	// The key is a copy: the verifier loses track of a variable whose
	// address a helper takes, and the loop's counter must stay known.
	for (int i = 0; i < MAX_FLOW_RULES; i++) {
		__u32 key = i;
		struct flow_rule *r;

		if (key >= limit)
			break;
		r = bpf_map_lookup_elem(&flow_rules, &key);
		if (r && rule_matches(r, &k))
			return 1;
	}
	return 0;
}

// redirect hands the frame to the queue's socket, if one is bound.
static __always_inline int redirect(struct xdp_md *ctx, enum counter steered)
{
	__u32 queue = ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks, &queue))
		return count(COUNTER_PASS_NO_SOCKET, XDP_PASS);
	count(steered, XDP_PASS);
	return bpf_redirect_map(&xsks, queue, XDP_PASS);
}

SEC("xdp.frags")
int softnic_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u16 proto;
	void *l3;

	if (flow_steered(ctx))
		return redirect(ctx, COUNTER_STEERED_FLOW);
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
	return redirect(ctx, COUNTER_STEERED);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
