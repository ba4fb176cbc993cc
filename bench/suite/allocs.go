package main

import (
	"context"
	"fmt"
)

// allocs is filled in below.
func (s *suite) allocs(ctx context.Context) {
	fmt.Println("== softnic allocations per packet")
	s.report(&Figure{Key: "softnic/allocs", Group: groupSoftnic, Unit: unitPkt, LowerIsBetter: true,
		Name: "allocations per packet, write_bw steady state", Err: "not implemented yet"})
}
