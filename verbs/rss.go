package verbs

import (
	"fmt"

	"github.com/softnic/softnic/roce"
)

// Receive side scaling (ibv_create_wq, ibv_create_rwq_ind_table,
// ibv_create_qp_ex with rx_hash_conf). softnic's receive work queue is a
// raw packet QP that only receives (moved to RTR: IBV_WQS_RDY); an RSS
// QP names a table of them, a power of two long, and a Toeplitz hash:
// each frame its flows take goes to the table's QP the hash picks.

// RSS hash fields (ibv_rx_hash_fields) and the key's length.
const (
	RxHashSrcIPv4    = roce.RSSSrcIPv4
	RxHashDstIPv4    = roce.RSSDstIPv4
	RxHashSrcIPv6    = roce.RSSSrcIPv6
	RxHashDstIPv6    = roce.RSSDstIPv6
	RxHashSrcPortTCP = roce.RSSSrcPortTCP
	RxHashDstPortTCP = roce.RSSDstPortTCP
	RxHashSrcPortUDP = roce.RSSSrcPortUDP
	RxHashDstPortUDP = roce.RSSDstPortUDP
	RxHashKeyLen     = roce.RSSKeyLen
	// MaxRSSTable is the longest indirection table.
	MaxRSSTable = roce.MaxRSSTable
)

// RSSQPInitAttr describes an RSS QP.
type RSSQPInitAttr struct {
	// Table is the indirection table: raw packet QPs of the device.
	Table []*QP
	// HashKey is the Toeplitz key; HashFields what it hashes.
	HashKey    [RxHashKeyLen]byte
	HashFields uint64
	// CQ is the CQ the RSS QP's own queues, which never complete
	// anything, name.
	CQ *CQ
}

// RSSBackend is a PDOps that makes RSS QPs.
type RSSBackend interface {
	CreateRSSQP(q *QP, a *RSSQPInitAttr, rss *roce.RSS) (QPOps, error)
}

// CreateRSSQP creates an RSS QP (ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_RX_HASH and IBV_QP_INIT_ATTR_IND_TABLE). It takes
// flows (QP.CreateFlow) and nothing else: posts fail.
func (pd *PD) CreateRSSQP(a *RSSQPInitAttr) (*QP, error) {
	rss := &roce.RSS{Key: a.HashKey, Fields: a.HashFields}
	for _, w := range a.Table {
		if w == nil || w.dev != pd.dev || w.Type() != QPTypeRawPacket || w.rss != nil {
			return nil, fmt.Errorf("create RSS QP: the table holds a QP that is no raw packet QP of the device: %w",
				ErrInvalidArgument)
		}
		rss.QPNs = append(rss.QPNs, w.QPN())
	}
	if err := rss.Check(); err != nil {
		return nil, fmt.Errorf("create RSS QP: %w", err)
	}
	if a.CQ == nil || a.CQ.dev != pd.dev {
		return nil, fmt.Errorf("create RSS QP: a CQ of the device is required: %w", ErrInvalidArgument)
	}
	rb, ok := pd.ops.(RSSBackend)
	if !ok {
		return nil, fmt.Errorf("create RSS QP: %w", ErrNotSupported)
	}
	q := &QP{dev: pd.dev, rss: rss}
	ops, err := rb.CreateRSSQP(q, a, rss)
	if err != nil {
		return nil, err
	}
	q.ops = ops
	q.table = append([]*QP(nil), a.Table...)
	for _, w := range q.table {
		w.tables.Add(1)
	}
	return q, nil
}

// IsRSS reports whether q is an RSS QP.
func (q *QP) IsRSS() bool { return q.rss != nil }

// CreateRSSQP implements RSSBackend: the RSS QP is a raw packet QP that
// never leaves RESET, for its number; its flows spread frames (engine's
// CreateFlow).
func (p *enginePD) CreateRSSQP(q *QP, a *RSSQPInitAttr, _ *roce.RSS) (QPOps, error) {
	return p.CreateQP(q, &QPInitAttr{SendCQ: a.CQ, RecvCQ: a.CQ, Type: QPTypeRawPacket, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
}
