package daemon_test

import (
	"testing"

	"github.com/softnic/softnic/rdmacm/rdmacmtest"
)

// TestCMMulticastThroughDaemons runs rdma_cm's multicast between two
// daemons' clients (cm_join_mcast, cm_leave_mcast).
func TestCMMulticastThroughDaemons(t *testing.T) {
	a, b := newCMSides(t, true, true)
	_, sendCM := a.program(t)
	_, recvCM := b.program(t)
	rdmacmtest.Multicast(t, sendCM, recvCM, addrA, addrB)
}
