package rdmacm_test

import (
	"net/netip"
	"testing"

	"github.com/softnic/softnic/rdmacm/rdmacmtest"
	"github.com/softnic/softnic/roce/memlink"
)

// TestCallersOwnQPs connects two IDs whose QPs their callers made and
// move themselves with InitQPAttr, Accept and Connect naming them by
// number, and the active side's Establish ending the exchange (rping -q).
func TestCallersOwnQPs(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, 0)
	rdmacmtest.CallersQPs(t, a.cm, b.cm, netip.AddrPortFrom(addrB, 7190))
}
