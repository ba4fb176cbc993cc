package ibv

import (
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"
)

// SendLimits are what a QP takes of one send work request: SGEs, and
// bytes of inline data.
type SendLimits struct{ MaxSGE, MaxInline int }

// CheckSendWR checks what a QP of type typ refuses of wr at post time,
// with the same errors whichever backend holds the QP (the engine, or a
// daemon's client before it writes the ring): an unknown opcode, one the
// service does not carry (UC: SENDs and WRITEs; UD: SENDs), inline data
// on other opcodes or over lim.MaxInline, more SGEs than lim.MaxSGE, and
// a UD send's remote QPN past 24 bits. A UD send's AH is the backend's to
// check. Every error wraps ErrInvalidArgument.
func CheckSendWR(typ QPType, lim SendLimits, wr *SendWR) error {
	switch {
	case wr.Opcode > WRFlush:
		return fmt.Errorf("post send: opcode %v: %w", wr.Opcode, ErrInvalidArgument)
	case (wr.Opcode == WRAtomicWrite || wr.Opcode == WRFlush) && typ != QPTypeRC:
		return fmt.Errorf("post send: opcode %v on a %v QP: %w", wr.Opcode, typ, ErrInvalidArgument)
	case wr.Opcode == WRFlush && (wr.FlushType&^(FlushGlobal|FlushPersistent) != 0 || wr.FlushType == 0 ||
		wr.FlushLevel > FlushMR || wr.FlushLength > 1<<31):
		return fmt.Errorf("post send: FLUSH type %#x level %d length %d: %w", wr.FlushType, wr.FlushLevel,
			wr.FlushLength, ErrInvalidArgument)
	case typ == QPTypeUC && !ucOpcode(wr.Opcode):
		return fmt.Errorf("post send: opcode %v on a UC QP: %w", wr.Opcode, ErrInvalidArgument)
	case typ == QPTypeRawPacket && wr.Opcode != WRSend:
		return fmt.Errorf("post send: opcode %v on a raw packet QP: %w", wr.Opcode, ErrInvalidArgument)
	case typ == QPTypeUD && wr.Opcode != WRSend && wr.Opcode != WRSendWithImm:
		return fmt.Errorf("post send: opcode %v on a UD QP: %w", wr.Opcode, ErrInvalidArgument)
	case wr.Opcode.IsLocal() && (wr.Flags&SendInline != 0 || len(wr.SGL) != 0):
		return fmt.Errorf("post send: %v with data: %w", wr.Opcode, ErrInvalidArgument)
	case wr.Flags&SendInline != 0 && (!(wr.Opcode.IsSend() || wr.Opcode.IsWrite()) || len(wr.InlineData) > lim.MaxInline):
		return fmt.Errorf("post send: inline %v of %d bytes (max %d): %w", wr.Opcode, len(wr.InlineData), lim.MaxInline,
			ErrInvalidArgument)
	case wr.Flags&SendInline == 0 && len(wr.SGL) > lim.MaxSGE:
		return fmt.Errorf("post send: %d SGEs, at most %d: %w", len(wr.SGL), lim.MaxSGE, ErrInvalidArgument)
	case typ == QPTypeUD && wr.RemoteQPN > header.PSNMask:
		return fmt.Errorf("post send: remote QPN %#x: %w", wr.RemoteQPN, ErrInvalidArgument)
	case typ == QPTypeXRCSend && wr.RemoteSRQN > header.PSNMask:
		return fmt.Errorf("post send: remote SRQ number %#x: %w", wr.RemoteSRQN, ErrInvalidArgument)
	case typ == QPTypeXRCRecv:
		return fmt.Errorf("post send: an XRC receive QP has no send queue: %w", ErrInvalidArgument)
	}
	return nil
}

// ucOpcode reports whether a UC QP carries op: SENDs and WRITEs, with or
// without immediate data (no READ, atomics or SEND with invalidate).
func ucOpcode(op WROpcode) bool {
	switch op {
	case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
		return true
	}
	return false
}
