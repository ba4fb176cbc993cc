package verbs

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/roce"
)

// AH is an address handle (ibv_ah): the destination of UD sends, named by
// each SendWR (SendWR.AH, with RemoteQPN and RemoteQKey).
type AH = ibtransport.AH

// QP types (ibv_qp_type).
type QPType = ibtransport.QPType

// QP types: RC is the default.
const (
	QPTypeRC = ibtransport.QPTypeRC
	QPTypeUC = ibtransport.QPTypeUC
	QPTypeUD = ibtransport.QPTypeUD
)

// QPAttrQKey selects QPAttr.QKey (IBV_QP_QKEY).
const QPAttrQKey = ibtransport.QPAttrQKey

// GRHLen is the size of the GRH at the start of every UD receive buffer.
const GRHLen = ibtransport.GRHLen

// WCWithGRH marks a completion whose receive buffer starts with a GRH.
const WCWithGRH = ibtransport.WCWithGRH

// Network header types of UD completions (WC.NetworkHdrType).
const (
	NetworkIPv4 = ibtransport.NetworkIPv4
	NetworkIPv6 = ibtransport.NetworkIPv6
)

// CreateAH creates an address handle for av (ibv_create_ah). Its source
// GID index must be in the device's GID table; the destination must be
// reachable from it.
func (pd *PD) CreateAH(av *AddressVector) (*AH, error) {
	if _, err := pd.dev.GID(int(av.SGIDIndex)); err != nil {
		return nil, fmt.Errorf("create AH: source GID index %d: %w", av.SGIDIndex, ErrInvalidArgument)
	}
	return pd.dev.group.CreateAH(av)
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
	var local GID
	switch grhVersion(grh) {
	case 4:
		ip := grh[GRHLen-20:]
		av.DGID = roce.GIDFromAddr(netip.AddrFrom4([4]byte(ip[12:16])))
		local = roce.GIDFromAddr(netip.AddrFrom4([4]byte(ip[16:20])))
		av.HopLimit = ip[8]
		av.TrafficClass = ip[1]
	case 6:
		copy(av.DGID[:], grh[8:24])
		copy(local[:], grh[24:40])
		flow := binary.BigEndian.Uint32(grh)
		av.HopLimit = grh[7]
		av.TrafficClass = uint8(flow >> 20)
		av.FlowLabel = flow & 0xfffff
	default:
		return av, fmt.Errorf("AH from WC: GRH of no known IP version: %w", ErrInvalidArgument)
	}
	for i, g := range d.GIDTable() {
		if g == local {
			av.SGIDIndex = uint8(i)
			return av, nil
		}
	}
	return av, fmt.Errorf("AH from WC: destination GID %v is not the device's: %w", local, ErrInvalidArgument)
}

// grhVersion tells which IP header a GRH holds, as libibverbs does: an
// IPv6 header unless the last 20 bytes are an IPv4 header with a valid
// checksum; 0 if neither.
func grhVersion(grh []byte) int {
	ip := grh[GRHLen-20 : GRHLen]
	if grh[0]>>4 != 6 {
		if ip[0]>>4 == 4 {
			return 4
		}
		return 0
	}
	if ip[0] != 0x45 {
		return 6
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum == 0xffff {
		return 4
	}
	return 6
}
