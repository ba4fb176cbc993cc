// phantom.c: the ECN marker of the DCQCN benchmark (bench/suite/dcqcn.go),
// a tc BPF program on the bottleneck's egress (clsact, before the qdisc).
// It keeps a phantom queue (HULL, Alizadeh et al., NSDI 2012): a virtual
// queue that every packet joins and that drains at DRAIN_BYTES_PER_SEC, a
// little under the bottleneck's rate; while it holds more than MARK_BYTES,
// every ECN-capable packet leaves marked CE. The real queue then stays
// nearly empty: the senders slow down before it builds.
//
// The two CPUs may race on the one map entry; a lost update shifts the
// phantom backlog by one packet, which does not matter here. A race can
// also leave last_ns ahead of this packet's clock reading: that gap is
// none, not an underflow, which read as a second of idleness and emptied
// the phantom queue while the real one filled.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#ifndef DRAIN_BYTES_PER_SEC
#define DRAIN_BYTES_PER_SEC 121250000ULL /* 97 % of 1 Gb/s */
#endif
#ifndef MARK_BYTES
#define MARK_BYTES 30000ULL
#endif
/* CAP_BYTES bounds the phantom backlog, as a switch's queue is bounded:
 * senders that outrun the drain for seconds (without congestion control)
 * would otherwise leave a backlog of hundreds of MB that marks every
 * packet of the next run for seconds. */
#ifndef CAP_BYTES
#define CAP_BYTES 1048576ULL
#endif

struct phantom {
	__u64 last_ns;
	__u64 backlog;
	__u64 seen;
	__u64 marked;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phantom);
} phantom SEC(".maps");

SEC("tc")
int mark(struct __sk_buff *skb)
{
	__u32 k = 0;
	struct phantom *p = bpf_map_lookup_elem(&phantom, &k);
	if (!p)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	__u64 gap = now > p->last_ns ? now - p->last_ns : 0;
	__u64 backlog = 0;
	if (gap < 1000000000ULL) {
		__u64 drained = gap * DRAIN_BYTES_PER_SEC / 1000000000ULL;
		backlog = p->backlog > drained ? p->backlog - drained : 0;
	}
	backlog += skb->len;
	if (backlog > CAP_BYTES)
		backlog = CAP_BYTES;
	p->backlog = backlog;
	if (now > p->last_ns)
		p->last_ns = now;
	p->seen++;
	if (backlog > MARK_BYTES) {
		bpf_skb_ecn_set_ce(skb);
		p->marked++;
	}
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
