package verbs

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
)

// AH is an address handle (ibv_ah): the destination of UD sends, named by
// each SendWR (SendWR.AH, with RemoteQPN and RemoteQKey).
type AH = ibv.AH

// QP types (ibv_qp_type).
type QPType = ibv.QPType

// QP types: RC is the default.
const (
	QPTypeRC = ibv.QPTypeRC
	QPTypeUC = ibv.QPTypeUC
	QPTypeUD = ibv.QPTypeUD
)

// QPAttrQKey selects QPAttr.QKey (IBV_QP_QKEY).
const QPAttrQKey = ibv.QPAttrQKey

// GRHLen is the size of the GRH at the start of every UD receive buffer.
const GRHLen = ibv.GRHLen

// WCWithGRH marks a completion whose receive buffer starts with a GRH.
const WCWithGRH = ibv.WCWithGRH

// Network header types of UD completions (WC.NetworkHdrType).
const (
	NetworkIPv4 = ibv.NetworkIPv4
	NetworkIPv6 = ibv.NetworkIPv6
)

// RoCE packet types: a UD completion's SL on RoCE, as ConnectX reports it
// (WC.SL; NetworkType.RoCEPacketType).
const (
	RoCEPacketIPv4 = ibv.RoCEPacketIPv4
	RoCEPacketIPv6 = ibv.RoCEPacketIPv6
)

// CreateAH creates an address handle for av (ibv_create_ah). Its source
// GID index must be in the device's GID table, else the error is
// ErrInvalidArgument (the RoCE path checks it); the destination must be
// reachable from it.
func (pd *PD) CreateAH(av *AddressVector) (*AH, error) {
	return pd.ops.CreateAH(av)
}

// CreateAHFromWC creates an address handle that answers the sender of a
// UD receive (ibv_create_ah_from_wc): grh is the start of its receive
// buffer.
func (pd *PD) CreateAHFromWC(wc *WC, grh []byte) (*AH, error) {
	av, err := pd.dev.InitAHFromWC(wc, grh)
	if err != nil {
		return nil, err
	}
	return pd.CreateAH(&av)
}

// InitAHFromWC returns the address vector that answers the sender of a UD
// receive (ibv_init_ah_from_wc), read from the GRH at the start of its
// receive buffer as libibverbs reads it: an IPv4 header in the GRH's last
// 20 bytes, or an IPv6 header.
func (d *Device) InitAHFromWC(wc *WC, grh []byte) (AddressVector, error) {
	var av AddressVector
	if wc.Flags&WCWithGRH == 0 || len(grh) < GRHLen {
		return av, fmt.Errorf("AH from WC: no GRH: %w", ErrInvalidArgument)
	}
	h, ok := roce.ParseGRH(grh)
	if !ok {
		return av, fmt.Errorf("AH from WC: GRH of no known IP version: %w", ErrInvalidArgument)
	}
	local := h.DGID
	av.DGID, av.TrafficClass, av.HopLimit, av.FlowLabel = h.SGID, h.TrafficClass, h.HopLimit, h.FlowLabel
	for i, g := range d.GIDTable() {
		if g == local {
			av.SGIDIndex = uint8(i)
			return av, nil
		}
	}
	return av, fmt.Errorf("AH from WC: destination GID %v is not the device's: %w", local, ErrInvalidArgument)
}
