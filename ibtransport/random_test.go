package ibtransport

import (
	"math/rand/v2"
	"testing"

	"github.com/softnic/softnic/ibtransport/header"
)

// TestRandomPackets throws random well-formed packets at fresh engines:
// quicker than the fuzzer at finding panics in the common paths.
func TestRandomPackets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 300 {
		ft := newFuzzTarget(t)
		info := &RecvInfo{SGID: peerGID}
		for range 5 {
			op := header.Opcode(rng.IntN(0x18))
			if !op.Valid() {
				continue
			}
			pl := 0
			if op.Info().HasPayload {
				pl = rng.IntN(300)
			}
			b := ft.packet(op, header.PSN(100+rng.IntN(3)), pl, func(p *header.Packet) {
				for _, h := range [][]byte{p.RETH, p.AtomicETH, p.AETH, p.AtomicAckETH, p.ImmDt, p.IETH} {
					for j := range h {
						h[j] = byte(rng.Uint32())
					}
				}
				if p.RETH != nil && rng.IntN(2) == 0 {
					p.RETH.SetRKey(ft.mr.RKey())
					p.RETH.SetVA(ft.mr.Addr() + uint64(rng.IntN(5000)))
				}
			})
			ft.e.Receive(b, info)
			ft.e.Process()
		}
	}
}
