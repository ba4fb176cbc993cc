package cm

import (
	"errors"
	"sync/atomic"

	"github.com/softnic/softnic/ibtransport/mad"
)

// PerAttr counts MADs of each CM attribute.
type PerAttr struct {
	REQ, MRA, REJ, REP, RTU, DREQ, DREP atomic.Uint64
	SIDRREQ, SIDRREP                    atomic.Uint64
}

func (p *PerAttr) of(a mad.AttrID) *atomic.Uint64 {
	switch a {
	case mad.AttrREQ:
		return &p.REQ
	case mad.AttrMRA:
		return &p.MRA
	case mad.AttrREJ:
		return &p.REJ
	case mad.AttrREP:
		return &p.REP
	case mad.AttrRTU:
		return &p.RTU
	case mad.AttrDREQ:
		return &p.DREQ
	case mad.AttrDREP:
		return &p.DREP
	case mad.AttrSIDRREQ:
		return &p.SIDRREQ
	case mad.AttrSIDRREP:
		return &p.SIDRREP
	}
	return nil
}

// Counters are the Manager's statistics, read atomically at any time.
type Counters struct {
	In  PerAttr `rdma:"rx_"` // good MADs received, by attribute
	Out PerAttr `rdma:"tx_"` // MADs handed to Config.Send, retransmissions included

	// MADs Parse refused, by reason; BadLength counts both short and long
	// datagrams.
	BadLength, BadBaseVersion, BadClass, BadClassVersion atomic.Uint64
	BadMethod, BadAttribute, BadARILength                atomic.Uint64

	// Good MADs dropped: no connection has the communication ID they name,
	// the IDs or QPN disagree with the connection's, or the connection is
	// in no state to take them.
	UnknownConn, IDMismatch, WrongState atomic.Uint64

	Duplicates      atomic.Uint64 // a REQ, REP, MRA, DREQ or RTU seen again
	Retransmissions atomic.Uint64 // REQ, REP or DREQ resent by its timer
	Timeouts        atomic.Uint64 // retries exhausted
	RejectsSent     atomic.Uint64 // REJs sent, by the consumer or by the manager
	SendErrors      atomic.Uint64 // Config.Send returned an error
}

// countBad counts a MAD Parse refused.
func (c *Counters) countBad(err error) {
	switch {
	case errors.Is(err, mad.ErrTruncated), errors.Is(err, mad.ErrPrivateDataTooLong):
		c.BadLength.Add(1)
	case errors.Is(err, mad.ErrBadBaseVersion):
		c.BadBaseVersion.Add(1)
	case errors.Is(err, mad.ErrBadClass):
		c.BadClass.Add(1)
	case errors.Is(err, mad.ErrBadClassVersion):
		c.BadClassVersion.Add(1)
	case errors.Is(err, mad.ErrUnknownMethod):
		c.BadMethod.Add(1)
	case errors.Is(err, mad.ErrBadARILength):
		c.BadARILength.Add(1)
	default:
		c.BadAttribute.Add(1)
	}
}
