package verbs

import (
	"fmt"

	"github.com/softnic/softnic/daemon/client"
)

// remoteAH creates an address handle in the daemon. The *AH a program
// holds is the transport's type, whose paths only an engine group makes:
// this process has no engine, so the AH comes from the device's ahGroup,
// a group without engines, which gives it its address vector (AH.AV) and
// nothing to send with. UD posts name the daemon's handle, found by the
// *AH (remoteObjects.ahs).
func (pd *PD) remoteAH(av *AddressVector) (*AH, error) {
	r := pd.dev.remote
	var h uint32
	err := r.call(func(c *client.Conn) (err error) { h, err = c.CreateAH(pd.handle, av); return err })
	if err != nil {
		return nil, fmt.Errorf("create AH: %w", daemonErr(err))
	}
	ah, err := r.ahGroup.CreateAH(av)
	if err != nil {
		r.call(func(c *client.Conn) error { return c.DestroyAH(h) })
		return nil, err
	}
	r.objects.ahs.Store(ah, h)
	return ah, nil
}
