package header_test

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/ibtransport/header"
)

// A packet is laid out in a buffer, its headers filled in place, and
// parsed back; a packet cut short is refused with ErrTruncated.
func Example() {
	buf := make([]byte, 64)
	var p header.Packet
	n, err := header.LayoutPacket(buf, header.OpRCWriteOnly, 5, &p)
	if err != nil {
		fmt.Println(err)
		return
	}
	p.BTH.SetDestQPN(0x12)
	p.BTH.SetPSN(7)
	p.BTH.SetAckReq(true)
	p.RETH.SetVA(0x1000)
	p.RETH.SetRKey(0xabc)
	p.RETH.SetDMALength(5)
	copy(p.Payload, "hello")

	var q header.Packet
	if err := header.ParsePacket(buf[:n], &q); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(q.Opcode(), q.BTH.DestQPN(), q.BTH.PSN(), q.RETH.RKey(), string(q.Payload))
	err = header.ParsePacket(buf[:header.BTHLen+2], &q)
	fmt.Println(errors.Is(err, header.ErrTruncated))
	// Output:
	// RC_RDMA_WRITE_ONLY 18 7 2748 hello
	// true
}
