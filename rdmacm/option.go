package rdmacm

import "fmt"

// Options of an ID (rdma_set_option, level RDMA_OPTION_ID), numbered as
// librdmacm's.
const (
	OptionTOS        = 0 // uint8: the traffic class of the ID's packets
	OptionACKTimeout = 3 // uint8: the local ACK timeout exponent of its QP
)

// SetOption sets one of the ID's options before it connects or accepts
// (rdma_set_option): OptionTOS, the traffic class its QP's packets and
// its REQ carry; OptionACKTimeout, its QP's local ACK timeout (4.096 µs ×
// 2^value, at most 31) in place of 14. Other options are not supported
// (ErrNotSupported).
func (id *ID) SetOption(option int, value uint8) error {
	if id.rem != nil {
		return id.remoteSetOption(option, value)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	switch option {
	case OptionTOS:
		id.tos = value
	case OptionACKTimeout:
		if value > 31 {
			return fmt.Errorf("set option: ACK timeout %d: %w", value, ErrInvalidArgument)
		}
		id.ackTimeout = value
	default:
		return fmt.Errorf("set option %d: %w", option, ErrNotSupported)
	}
	return nil
}

// qpACKTimeout is the ACK timeout the ID's QP gets at RTS. id.mu is held.
func (id *ID) qpACKTimeout() uint8 {
	if id.ackTimeout == 0 {
		return ackTimeout
	}
	return id.ackTimeout
}
