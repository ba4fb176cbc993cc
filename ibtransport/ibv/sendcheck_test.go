package ibv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
)

// TestCheckSendWR: what each service refuses at post time, the check
// the engine and a daemon's client share.
func TestCheckSendWR(t *testing.T) {
	lim := SendLimits{MaxSGE: 2, MaxInline: 16}
	sge := []SGE{{Addr: 1, Length: 1, LKey: 1}}
	for _, tc := range []struct {
		name string
		typ  QPType
		wr   SendWR
		ok   bool
	}{
		{"RC send", QPTypeRC, SendWR{Opcode: WRSend, SGL: sge}, true},
		{"RC READ", QPTypeRC, SendWR{Opcode: WRRDMARead, SGL: sge}, true},
		{"RC atomic", QPTypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SGL: sge}, true},
		{"unknown opcode", QPTypeRC, SendWR{Opcode: WRFlush + 1}, false},
		{"RC ATOMIC_WRITE", QPTypeRC, SendWR{Opcode: WRAtomicWrite}, true},
		{"UC ATOMIC_WRITE", QPTypeUC, SendWR{Opcode: WRAtomicWrite}, false},
		{"RC FLUSH", QPTypeRC, SendWR{Opcode: WRFlush, FlushType: FlushGlobal, FlushLength: 1 << 31}, true},
		{"RC FLUSH of the region", QPTypeRC, SendWR{Opcode: WRFlush, FlushType: FlushGlobal, FlushLevel: FlushMR}, true},
		{"FLUSH of no type", QPTypeRC, SendWR{Opcode: WRFlush}, false},
		{"FLUSH of an unknown type", QPTypeRC, SendWR{Opcode: WRFlush, FlushType: 4}, false},
		{"FLUSH of an unknown level", QPTypeRC, SendWR{Opcode: WRFlush, FlushType: FlushGlobal, FlushLevel: 2}, false},
		{"FLUSH past 2 GiB", QPTypeRC, SendWR{Opcode: WRFlush, FlushType: FlushGlobal, FlushLength: 1<<31 + 1}, false},
		{"UD FLUSH", QPTypeUD, SendWR{Opcode: WRFlush, FlushType: FlushGlobal}, false},
		{"RC bind", QPTypeRC, SendWR{Opcode: WRBindMW}, true},
		{"RC local invalidate", QPTypeRC, SendWR{Opcode: WRLocalInv}, true},
		{"bind with an SGL", QPTypeRC, SendWR{Opcode: WRBindMW, SGL: sge}, false},
		{"UD bind", QPTypeUD, SendWR{Opcode: WRBindMW}, false},
		{"UC WRITE", QPTypeUC, SendWR{Opcode: WRRDMAWriteWithImm, SGL: sge}, true},
		{"UC READ", QPTypeUC, SendWR{Opcode: WRRDMARead, SGL: sge}, false},
		{"UC send with invalidate", QPTypeUC, SendWR{Opcode: WRSendWithInv}, false},
		{"UD send", QPTypeUD, SendWR{Opcode: WRSendWithImm, SGL: sge, RemoteQPN: header.PSNMask}, true},
		{"UD WRITE", QPTypeUD, SendWR{Opcode: WRRDMAWrite, SGL: sge}, false},
		{"UD remote QPN past 24 bits", QPTypeUD, SendWR{Opcode: WRSend, RemoteQPN: header.PSNMask + 1}, false},
		{"inline at the limit", QPTypeRC, SendWR{Opcode: WRRDMAWrite, Flags: SendInline, InlineData: make([]byte, 16)}, true},
		{"inline past the limit", QPTypeRC, SendWR{Opcode: WRSend, Flags: SendInline, InlineData: make([]byte, 17)}, false},
		{"inline READ", QPTypeRC, SendWR{Opcode: WRRDMARead, Flags: SendInline}, false},
		{"SGEs at the limit", QPTypeRC, SendWR{Opcode: WRSend, SGL: make([]SGE, 2)}, true},
		{"SGEs past the limit", QPTypeRC, SendWR{Opcode: WRSend, SGL: make([]SGE, 3)}, false},
		{"inline with SGEs past the limit", QPTypeRC, SendWR{Opcode: WRSend, Flags: SendInline, SGL: make([]SGE, 3)}, true},
	} {
		err := CheckSendWR(tc.typ, lim, &tc.wr)
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, ErrInvalidArgument, tc.name)
		}
	}
}
