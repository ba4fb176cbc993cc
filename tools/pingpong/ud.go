package pingpong

import (
	"fmt"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// ibv_ud_pingpong (ud_pingpong.c) differs from rc_pingpong in its QP and
// its buffer: every receive gets the GRH in the buffer's first 40 bytes,
// in front of the message; sends go from byte 40 to the peer's QP through
// an address handle, with the Q_Key both sides set.

// udQKey is ud_pingpong's Q_Key.
const udQKey = 0x11111111

// UDDefaultSize is ud_pingpong's message size when -s is not given.
const UDDefaultSize = 1024

// udHopLimit is the hop limit of ud_pingpong's address handle.
const udHopLimit = 64

// udPeer is where a UD ping-pong sends.
type udPeer struct {
	pd  *verbs.PD
	ah  *verbs.AH
	qpn uint32
	sge []verbs.SGE // the message, after the GRH's room
}

// dataOff is where the message starts in the buffer: after the GRH on UD.
func (c *pingpong) dataOff() int {
	if c.cfg.UD {
		return verbs.GRHLen
	}
	return 0
}

// checkUDSize is ud_pingpong's check of the message size against the
// port's active MTU.
func (c *pingpong) checkUDSize() error {
	mtu := roce.ActiveIBMTU(c.dev.LinkMTU)
	if c.cfg.Size > mtu {
		return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
	}
	return nil
}

// connectUD is ud_pingpong's pp_connect_ctx: RTR, RTS with the PSN, and an
// address handle to the peer's GID.
func (c *pingpong) connectUD(myPSN uint32, rem oob.PingpongDest) error {
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: verbs.PSN(myPSN)}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	ah, err := c.ud.pd.CreateAH(&verbs.AddressVector{DGID: rem.GID, SGIDIndex: uint8(c.gidx), HopLimit: udHopLimit})
	if err != nil {
		return fmt.Errorf("Failed to create AH: %w", err)
	}
	c.ud.ah, c.ud.qpn = ah, rem.QPN
	c.ud.sge = []verbs.SGE{c.mr.SGE(verbs.GRHLen, c.cfg.Size)}
	return nil
}

// sendWR aims wr at the peer: the message after the GRH's room, to the
// peer's QP through the AH.
func (u *udPeer) sendWR(wr *verbs.SendWR) {
	wr.SGL = u.sge
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = u.ah, u.qpn, udQKey
}
