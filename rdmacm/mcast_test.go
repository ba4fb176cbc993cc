package rdmacm_test

import (
	"testing"

	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce/memlink"
)

// TestMulticast runs rdma_cm's multicast between in-process CMs.
func TestMulticast(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	rdmacmtest.Multicast(t, a.cm, b.cm, addrA, addrB)
}
