package ibv_test

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// A READ may be posted to an RC QP but not to a UD QP; the refusal wraps
// ErrInvalidArgument, whichever backend makes it.
func Example() {
	lim := ibv.SendLimits{MaxSGE: 1, MaxInline: 64}
	wr := ibv.SendWR{Opcode: ibv.WRRDMARead, SGL: []ibv.SGE{{Addr: 0x1000, Length: 8, LKey: 7}}}
	for _, typ := range []ibv.QPType{ibv.QPTypeRC, ibv.QPTypeUD} {
		err := ibv.CheckSendWR(typ, lim, &wr)
		fmt.Println(typ, err == nil, errors.Is(err, ibv.ErrInvalidArgument))
	}
	fmt.Println(wr.Opcode.WCOpcode())
	// Output:
	// RC true false
	// UD false true
	// RDMA_READ
}

// Merge records the attributes a mask selects, as a QP's Query returns
// them after a Modify.
func ExampleQPAttr_Merge() {
	var a ibv.QPAttr
	a.Merge(&ibv.QPAttr{PathMTU: ibv.MTU1024, DestQPN: 0x12, Timeout: 14}, ibv.QPAttrPathMTU|ibv.QPAttrDestQPN)
	fmt.Println(a.PathMTU.Bytes(), a.DestQPN, a.Timeout)
	// Output: 1024 18 0
}
