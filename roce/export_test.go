package roce

import (
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// Path prepares transmission to av on the device's first lane, as
// connecting a QP does, for tests of neighbour resolution.
func (d *Device) Path(av *ibv.AddressVector, qpn uint32, pathMTU int) (ibtransport.TxPath, error) {
	return d.lanes[0].Path(av, qpn, pathMTU)
}
