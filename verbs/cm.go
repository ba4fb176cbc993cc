package verbs

import (
	"encoding/binary"

	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
)

// CM returns the device's InfiniBand connection manager: it answers every
// connection request that comes to QP1 (with a reject when nobody
// listens), and package rdmacm connects and listens through it. Nil on a
// device reached through a daemon, whose QP1 and CM are the daemon's.
func (d *Device) CM() *cm.Manager { return d.ops.CM() }

// NodeGUID returns the device's node GUID: the EUI-64 of its MAC address,
// as Linux gives RoCE devices, which also ends the MAC's link-local GID.
func (d *Device) NodeGUID() uint64 { return d.ops.NodeGUID() }

func (e *engine) NodeGUID() uint64 {
	g := roce.DefaultGID(e.dev.Link().HardwareAddr()).As16()
	return binary.BigEndian.Uint64(g[8:])
}

// startCM starts the connection manager on QP1.
func (e *engine) startCM() {
	g := e.gsi
	e.cm = cm.New(cm.Config{
		Send:        func(to AddressVector, m mad.MAD) error { return g.send(to, m) },
		CAGUID:      e.NodeGUID(),
		Millisecond: e.cfg.CMMillisecond,
	})
	g.start(e.cm.Receive)
}
