// SPDX-License-Identifier: MIT
/*
 * The GFW's fully-encrypted-traffic exemptions (Wu et al., USENIX Security 2023,
 * Algorithm 1) as a tc classifier: the kernel fast path of censor_sim's "fet"
 * detector (censor_sim/detectors/fet.py is the reference; docs/censors/fet.md §2).
 *
 * Why in the kernel: the Python censor pays a queue or log copy and an engine
 * call for every new flow's first payload, tens of microseconds, while the rule
 * itself is one pass over the bytes. Here the pass runs where the packet already
 * is, and user space hears only of flows that no rule exempts (a ring buffer of
 * fet_event, with the judged bytes for a policy that probes), which are the ones
 * the censor's policy acts on.
 *
 * What it does, per packet arriving on the interface it is attached to (the
 * router's client side):
 *   - a SYN (no ACK) to a targeted server and port opens a flow, keyed by its
 *     4-tuple, in an LRU map: the classifier must see a connection begin, as a
 *     censor that tracks TCP does;
 *   - the first payload on such a flow, client to server, is judged and the flow
 *     forgotten; rules Ex1..Ex5 are tried in the paper's order and the first that
 *     exempts is counted, and a flow none exempts is reported with the same
 *     features the Python detector logs;
 *   - every packet passes (TC_ACT_OK): blocking is the policy's, in user space.
 *
 * Payloads longer than FET_MAX_PAYLOAD (a GSO packet from a sender on this host's
 * veths) are judged on their first FET_MAX_PAYLOAD bytes, the first segment a
 * 1500-byte-MTU wire would carry; such judgements are counted apart.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define FET_MAX_PAYLOAD 1460
#define SCRATCH 2048 /* a power of two above FET_MAX_PAYLOAD, for index masking */

/* Counter slots in fet_counts; censor_sim/bpf/fetclassifier.py names them. */
enum {
	C_PACKETS,     /* packets the program ran on */
	C_FLOWS,       /* SYNs to a targeted server and port: flows opened */
	C_JUDGED,      /* first payloads judged */
	C_EX1, C_EX2, C_EX3, C_EX4, C_EX5,
	C_NOT_EXEMPT,  /* reported to user space */
	C_LOST,        /* reports the ring buffer had no room for */
	C_TRUNCATED,   /* judged on their first FET_MAX_PAYLOAD bytes */
	C_SLOTS,
};

struct flow_key {
	__u32 client[4]; /* IPv4 in client[0], the rest zero */
	__u32 server[4];
	__u16 client_port; /* network byte order, as on the wire */
	__u16 server_port;
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
};

struct fet_event {
	struct flow_key flow;
	__u32 length;            /* bytes judged */
	__u32 wire_length;       /* the packet's payload bytes */
	__u32 bits;              /* set bits in the judged bytes */
	__u32 leading_printable; /* printable bytes before the first unprintable */
	__u32 printable;         /* printable bytes */
	__u32 longest_run;       /* longest run of printable bytes */
	__u32 seq;               /* the packet's TCP numbers and flags, for actions */
	__u32 ack;               /* that answer it (a forged RST lands in the window) */
	__u8 tcp_flags;
	__u8 pad[3];
	__u8 payload[FET_MAX_PAYLOAD]; /* the judged bytes: length of them are set */
};

struct fet_config {
	__u32 any_port; /* 1: every server port is targeted; else fet_ports lists them */
	__u32 pad;
	/* Wake the reader once this many bytes of reports wait (a batch); fewer wait
	 * for its timer. 0 wakes it for every report. */
	__u64 wakeup_bytes;
};

struct lpm4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct lpm6 {
	__u32 prefixlen;
	__u8 addr[16];
};

struct scratch {
	__u8 data[SCRATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, __u8);
} fet_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm4);
	__type(value, __u8);
} fet_servers4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm6);
	__type(value, __u8);
} fet_servers6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16); /* host byte order */
	__type(value, __u8);
} fet_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fet_config);
} fet_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} fet_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} fet_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* about 2,800 reports */
} fet_events SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&fet_counts, &slot);

	if (n)
		*n += 1;
}

static __always_inline int targeted(const struct flow_key *k)
{
	__u32 zero = 0;
	struct fet_config *cfg = bpf_map_lookup_elem(&fet_config, &zero);
	__u16 port = bpf_ntohs(k->server_port);

	if (!cfg)
		return 0;
	if (!cfg->any_port && !bpf_map_lookup_elem(&fet_ports, &port))
		return 0;
	if (k->family == 4) {
		struct lpm4 key = {.prefixlen = 32};

		__builtin_memcpy(key.addr, &k->server[0], 4);
		return bpf_map_lookup_elem(&fet_servers4, &key) != NULL;
	}
	struct lpm6 key6 = {.prefixlen = 128};

	__builtin_memcpy(key6.addr, k->server, 16);
	return bpf_map_lookup_elem(&fet_servers6, &key6) != NULL;
}

static __always_inline __u32 popcount8(__u32 b)
{
	b = b - ((b >> 1) & 0x55);
	b = (b & 0x33) + ((b >> 2) & 0x33);
	return (b + (b >> 4)) & 0x0f;
}

/* Ex5: a TLS record header [\x16-\x17]\x03[\x00-\x09], or one of the paper's four
 * HTTP method prefixes, trailing space included. */
static __always_inline int known_protocol(const __u8 *p, __u32 n)
{
	if (n >= 3 && (p[0] == 0x16 || p[0] == 0x17) && p[1] == 0x03 && p[2] <= 0x09)
		return 1;
	if (n >= 4 && ((p[0] == 'G' && p[1] == 'E' && p[2] == 'T' && p[3] == ' ') ||
		       (p[0] == 'P' && p[1] == 'U' && p[2] == 'T' && p[3] == ' ')))
		return 1;
	if (n >= 5 && ((p[0] == 'P' && p[1] == 'O' && p[2] == 'S' && p[3] == 'T' && p[4] == ' ') ||
		       (p[0] == 'H' && p[1] == 'E' && p[2] == 'A' && p[3] == 'D' && p[4] == ' ')))
		return 1;
	return 0;
}

/* An opaque copy: the compiler can no longer see where the value came from, so
 * it cannot fold the arithmetic around it back into a compare and a branch. */
#define OPAQUE(x) asm volatile("" : "+r"(x))

static __always_inline void judge(struct __sk_buff *skb, const struct flow_key *k,
				  const struct tcphdr *tcp, __u32 offset, __u32 wire_length)
{
	__u32 zero = 0;
	struct scratch *buf = bpf_map_lookup_elem(&fet_scratch, &zero);
	__u32 n = wire_length, bits, printable, longest, leading;

	if (!buf)
		return;
	count(C_JUDGED);
	if (n > FET_MAX_PAYLOAD) {
		n = FET_MAX_PAYLOAD;
		count(C_TRUNCATED);
	}
	if (n < 1 || bpf_skb_load_bytes(skb, offset, buf->data, n) < 0)
		return;
	/* One pass over the judged bytes with no branch but the loop's: the verifier
	 * walks each of up to FET_MAX_PAYLOAD iterations, and a branch per byte would
	 * multiply its paths past its million-instruction budget. */
	__u64 b64, p, t, bits64 = 0, printable64 = 0, run = 0, longest64 = 0, leading64 = 0;
	__u64 seen = 0;
	__s64 d;

	for (__u32 i = 0; i < FET_MAX_PAYLOAD; i++) {
		if (i >= n)
			break;
		b64 = buf->data[i & (SCRATCH - 1)];
		t = 0x5e - ((b64 - 0x20) & 0xff); /* wraps (top bit set) unless printable */
		OPAQUE(t);
		p = (t >> 63) ^ 1;
		bits64 += popcount8(b64);
		printable64 += p;
		run = (run + 1) * p;
		d = (__s64)(longest64 - run);
		OPAQUE(d);
		longest64 -= (__u64)(d & (d >> 63)); /* max(longest, run) */
		leading64 += p & (seen ^ 1);
		seen |= p ^ 1;
	}
	bits = bits64;
	printable = printable64;
	longest = longest64;
	leading = leading64;
	/* Algorithm 1, in integers as the Python detector compares them. */
	if (10 * bits <= 34 * n || 10 * bits >= 46 * n) {
		count(C_EX1);
		return;
	}
	if (leading >= 6) {
		count(C_EX2);
		return;
	}
	if (2 * printable > n) {
		count(C_EX3);
		return;
	}
	if (longest > 20) {
		count(C_EX4);
		return;
	}
	if (known_protocol(buf->data, n)) {
		count(C_EX5);
		return;
	}
	count(C_NOT_EXEMPT);
	struct fet_event *ev = bpf_ringbuf_reserve(&fet_events, sizeof(*ev), 0);

	if (!ev) {
		count(C_LOST);
		return;
	}
	ev->flow = *k;
	ev->length = n;
	ev->wire_length = wire_length;
	ev->bits = bits;
	ev->leading_printable = leading;
	ev->printable = printable;
	ev->longest_run = longest;
	ev->seq = bpf_ntohl(tcp->seq);
	ev->ack = bpf_ntohl(tcp->ack_seq);
	ev->tcp_flags = ((const __u8 *)tcp)[13];
	if (n > FET_MAX_PAYLOAD || bpf_skb_load_bytes(skb, offset, ev->payload, n) < 0) {
		bpf_ringbuf_discard(ev, 0);
		return;
	}
	__u32 zero_key = 0;
	struct fet_config *cfg = bpf_map_lookup_elem(&fet_config, &zero_key);
	__u64 wake = 0;

	/* A wakeup per report costs the reader a trip through its event loop per
	 * flow; like an NFLOG batch, reports wait for a batch or the reader's timer. */
	if (cfg && cfg->wakeup_bytes)
		wake = bpf_ringbuf_query(&fet_events, BPF_RB_AVAIL_DATA) >= cfg->wakeup_bytes
			? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(ev, wake);
}

SEC("tc")
int fet_classify(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct flow_key k = {};
	__u32 l4;
	__u32 ip_end;

	count(C_PACKETS);
	if ((void *)(eth + 1) > end)
		return TC_ACT_OK;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP || ip->ihl < 5)
			return TC_ACT_OK;
		if (ip->frag_off & bpf_htons(0x1fff)) /* a later fragment: no TCP header */
			return TC_ACT_OK;
		k.family = 4;
		k.client[0] = ip->saddr;
		k.server[0] = ip->daddr;
		l4 = sizeof(*eth) + ip->ihl * 4;
		ip_end = sizeof(*eth) + bpf_ntohs(ip->tot_len);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		/* Only a TCP header straight after the fixed header; extension headers
		 * are not walked (docs/lab/censor.md §1). */
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			return TC_ACT_OK;
		k.family = 6;
		__builtin_memcpy(k.client, &ip6->saddr, 16);
		__builtin_memcpy(k.server, &ip6->daddr, 16);
		l4 = sizeof(*eth) + sizeof(*ip6);
		ip_end = l4 + bpf_ntohs(ip6->payload_len);
	} else {
		return TC_ACT_OK;
	}
	struct tcphdr tcp;

	if (bpf_skb_load_bytes(skb, l4, &tcp, sizeof(tcp)) < 0)
		return TC_ACT_OK;
	k.client_port = tcp.source;
	k.server_port = tcp.dest;
	if (tcp.syn && !tcp.ack) {
		if (targeted(&k)) {
			__u8 open = 1;

			bpf_map_update_elem(&fet_flows, &k, &open, BPF_ANY);
			count(C_FLOWS);
		}
		return TC_ACT_OK;
	}
	__u32 payload = l4 + tcp.doff * 4;

	if (tcp.syn || tcp.rst || ip_end <= payload || ip_end > skb->len)
		return TC_ACT_OK;
	if (!bpf_map_lookup_elem(&fet_flows, &k))
		return TC_ACT_OK;
	bpf_map_delete_elem(&fet_flows, &k);
	judge(skb, &k, &tcp, payload, ip_end - payload);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
