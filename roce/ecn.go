package roce

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// ECN is the ECN codepoint (RFC 3168) a device's packets leave with: the
// two low bits of the IPv4 TOS or the IPv6 traffic class.
type ECN uint8

// ECN settings. The zero value is ECT(0), as ConnectX marks RoCEv2 data.
const (
	ECNDefault ECN = iota // ECT(0)
	ECNNotECT             // not ECN-capable: the traffic class as the QP gives it, like Linux rxe
	ECNECT0
	ECNECT1
)

// Codepoints of the ECN field.
const (
	ecnNotECT = 0b00
	ecnECT1   = 0b01
	ecnECT0   = 0b10
	ecnCE     = 0b11
)

// codepoint returns the bits e puts in the ECN field, and whether it
// overrides the QP's own.
func (e ECN) codepoint() (uint8, bool) {
	switch e {
	case ECNNotECT:
		return 0, false
	case ECNECT1:
		return ecnECT1, true
	default:
		return ecnECT0, true
	}
}

// ParseECN parses an ECN setting as the daemon's flags give it: "ect0",
// "ect1" or "off".
func ParseECN(s string) (ECN, error) {
	switch s {
	case "ect0", "":
		return ECNECT0, nil
	case "ect1":
		return ECNECT1, nil
	case "off", "none":
		return ECNNotECT, nil
	}
	return 0, fmt.Errorf("ECN %q: want ect0, ect1 or off: %w", s, ibv.ErrInvalidArgument)
}

// DefaultCNPDSCP is the DSCP ConnectX sends CNPs with (CS6).
const DefaultCNPDSCP = 48

// trafficClass returns the traffic class a QP's data packets leave with:
// the QP's DSCP (the upper six bits of its traffic class) and the
// device's ECN codepoint.
func (d *Device) trafficClass(tc uint8) uint8 {
	cp, ok := d.ecn.codepoint()
	if !ok {
		return tc
	}
	return tc&^3 | cp
}

// cnpTrafficClass returns the traffic class of the device's CNPs: their
// own DSCP, and ECT(0) unless ECN is off (ConnectX's CNPs carry 0xc2).
func (d *Device) cnpTrafficClass() uint8 {
	cp, ok := d.ecn.codepoint()
	if !ok {
		cp = ecnNotECT
	}
	return d.cnpDSCP<<2 | cp
}

// setCongestion takes the ECN settings of cfg and checks its congestion
// control.
func (d *Device) setCongestion(cfg DeviceConfig) error {
	if cfg.ECN > ECNECT1 {
		return fmt.Errorf("new RoCE device: ECN setting %d: %w", cfg.ECN, ibv.ErrInvalidArgument)
	}
	d.ecn = cfg.ECN
	switch {
	case cfg.CNPDSCP == 0:
		d.cnpDSCP = DefaultCNPDSCP
	case cfg.CNPDSCP < 0:
		d.cnpDSCP = 0
	case cfg.CNPDSCP > 63:
		return fmt.Errorf("new RoCE device: CNP DSCP %d: %w", cfg.CNPDSCP, ibv.ErrInvalidArgument)
	default:
		d.cnpDSCP = uint8(cfg.CNPDSCP)
	}
	if err := cfg.Congestion.Check(); err != nil {
		return fmt.Errorf("new RoCE device: %w", err)
	}
	return nil
}
