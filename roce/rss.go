package roce

import (
	"encoding/binary"
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// Receive side scaling (an RSS QP's flows, ibv_create_qp_ex with
// rx_hash_conf): a flow spreads the frames it takes over several raw
// packet QPs (the receive work queues of an indirection table) by a
// Toeplitz hash of the fields the RSS QP names, as a ConnectX does.

// RSS hash fields (ibv_rx_hash_fields).
const (
	RSSSrcIPv4    = 1 << 0
	RSSDstIPv4    = 1 << 1
	RSSSrcIPv6    = 1 << 2
	RSSDstIPv6    = 1 << 3
	RSSSrcPortTCP = 1 << 4
	RSSDstPortTCP = 1 << 5
	RSSSrcPortUDP = 1 << 6
	RSSDstPortUDP = 1 << 7
	// RSSFields are those softnic hashes.
	RSSFields = RSSSrcIPv4 | RSSDstIPv4 | RSSSrcIPv6 | RSSDstIPv6 | RSSSrcPortTCP | RSSDstPortTCP | RSSSrcPortUDP | RSSDstPortUDP
)

// RSSKeyLen is the Toeplitz key's length (40 bytes, as ConnectX's).
const RSSKeyLen = 40

// RSS is where an RSS QP's flows deliver: its indirection table's QPs,
// a power of two of them, the hash key and the fields hashed.
type RSS struct {
	QPNs   []uint32
	Key    [RSSKeyLen]byte
	Fields uint64
}

// Check refuses an empty table or one not a power of two long, and
// fields softnic does not hash.
func (r *RSS) Check() error {
	n := len(r.QPNs)
	if n == 0 || n&(n-1) != 0 || n > MaxRSSTable {
		return fmt.Errorf("RSS table of %d QPs: %w", n, ibv.ErrInvalidArgument)
	}
	if r.Fields&^RSSFields != 0 {
		return fmt.Errorf("RSS hash fields %#x: %w", r.Fields, ibv.ErrInvalidArgument)
	}
	return nil
}

// MaxRSSTable is the longest indirection table.
const MaxRSSTable = 64

// AddRSSFlow is AddFlow for an RSS QP: the frames attr matches go to one
// of rss's QPs each, by their hash.
func (d *Device) AddRSSFlow(rss *RSS, attr *ibv.FlowAttr) (uint64, error) {
	if err := rss.Check(); err != nil {
		return 0, fmt.Errorf("create flow: %w", err)
	}
	r := *rss
	r.QPNs = append([]uint32(nil), rss.QPNs...)
	return d.addFlow(flow{qpn: r.QPNs[0], rss: &r, attr: *attr})
}

// pick returns the QP of the table that the frame k describes goes to.
func (r *RSS) pick(k *flowKey) uint32 {
	var in [36]byte
	n := 0
	put := func(b []byte) { n += copy(in[n:], b) }
	if k.ipVer == 4 {
		if r.Fields&RSSSrcIPv4 != 0 {
			put(k.ip.Src[:4])
		}
		if r.Fields&RSSDstIPv4 != 0 {
			put(k.ip.Dst[:4])
		}
	}
	if k.ipVer == 6 {
		if r.Fields&RSSSrcIPv6 != 0 {
			put(k.ip.Src[:])
		}
		if r.Fields&RSSDstIPv6 != 0 {
			put(k.ip.Dst[:])
		}
	}
	if k.l4 {
		var p [2]byte
		src, dst := uint64(RSSSrcPortUDP), uint64(RSSDstPortUDP)
		if k.ip.Proto == protoTCP {
			src, dst = RSSSrcPortTCP, RSSDstPortTCP
		}
		if r.Fields&src != 0 {
			binary.BigEndian.PutUint16(p[:], k.ports.SrcPort)
			put(p[:])
		}
		if r.Fields&dst != 0 {
			binary.BigEndian.PutUint16(p[:], k.ports.DstPort)
			put(p[:])
		}
	}
	h := toeplitz(&r.Key, in[:n])
	return r.QPNs[int(h)&(len(r.QPNs)-1)]
}

// toeplitz is the Toeplitz hash of in under key (Microsoft's RSS
// specification): for each set bit of the input, XOR in the 32 key bits
// that start at its position.
func toeplitz(key *[RSSKeyLen]byte, in []byte) uint32 {
	var h uint32
	window := binary.BigEndian.Uint32(key[0:4])
	next := 4 // the key byte that slides into the window next
	for _, b := range in {
		for bit := 7; bit >= 0; bit-- {
			if b&(1<<bit) != 0 {
				h ^= window
			}
			window <<= 1
			if next < RSSKeyLen && key[next]&(1<<bit) != 0 {
				window |= 1
			}
		}
		next++
	}
	return h
}
