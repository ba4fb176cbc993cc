package verbs

import (
	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/mad"
)

// CM returns the device's InfiniBand connection manager: it answers every
// connection request that comes to QP1 (with a reject when nobody
// listens), and package rdmacm connects and listens through it.
func (d *Device) CM() *cm.Manager { return d.cm }

// NodeGUID returns the device's node GUID: the EUI-64 of its MAC address,
// as Linux gives RoCE devices.
func (d *Device) NodeGUID() uint64 {
	m := d.dev.Link().HardwareAddr()
	return uint64(m[0]^0x02)<<56 | uint64(m[1])<<48 | uint64(m[2])<<40 | 0xff<<32 | 0xfe<<24 |
		uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

// startCM starts the connection manager on QP1.
func (d *Device) startCM() {
	g := d.gsi
	d.cm = cm.New(cm.Config{
		Send:        func(to AddressVector, m mad.MAD) error { return g.send(to, m) },
		CAGUID:      d.NodeGUID(),
		Millisecond: d.cfg.CMMillisecond,
	})
	g.start(d.cm.Receive)
}
