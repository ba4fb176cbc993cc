package rdmacm

import "fmt"

// SetOption keeps the option for the QP's RTS and the REQ.
func (id *inprocID) SetOption(option int, value uint8) error {
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
func (id *inprocID) qpACKTimeout() uint8 {
	if id.ackTimeout == 0 {
		return ackTimeout
	}
	return id.ackTimeout
}
