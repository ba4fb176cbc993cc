package roce

import (
	"net/netip"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// Multicast: a device joins a group when its first QP attaches to it
// (ibtransport.Group.SetMcastJoin): the link then passes the group's
// frames (MulticastLink), and lane.receive takes frames to the group's
// address as it takes those to the device's own. Datagrams to a group
// leave to its multicast MAC address, with no neighbour to resolve, and
// are looped back to the device's own attached QPs too, as rxe and
// ConnectX do.

// MulticastLink is a Link that must be told of the groups the device
// joins to pass their frames: an xdplink steers the group's address to
// the device and joins the group on the interface (IGMP/MLD). A link
// that is not one (memlink) passes every frame anyway.
type MulticastLink interface {
	Link
	// JoinGroup starts passing frames to group a; LeaveGroup stops. Each
	// is called once per group: the device counts its QPs.
	JoinGroup(a netip.Addr) error
	LeaveGroup(a netip.Addr) error
}

// joinGroup is the engines' hook (SetMcastJoin): it tells the link.
func (d *Device) joinGroup(gid ibv.GID, joined bool) error {
	ml, ok := d.link.(MulticastLink)
	if !ok {
		return nil
	}
	if joined {
		return ml.JoinGroup(AddrFromGID(gid))
	}
	return ml.LeaveGroup(AddrFromGID(gid))
}

// MulticastMAC returns the Ethernet address frames to group a go to:
// 01:00:5e and the low 23 bits of an IPv4 group (RFC 1112), 33:33 and the
// low 32 bits of an IPv6 one (RFC 2464).
func MulticastMAC(a netip.Addr) [6]byte {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return [6]byte{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
	}
	b := a.As16()
	return [6]byte{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// mcastGIDIndex returns the index a datagram to group gid is received
// at: the device's first GID of the group's address family (-1: none).
func (d *Device) mcastGIDIndex(gid ibv.GID) int {
	v4 := IsIPv4GID(gid)
	for i, a := range d.table.Load().addrs {
		if a.IsValid() && a.Is4() == v4 {
			return i
		}
	}
	return -1
}

// mcastDst returns the GID index at which the device receives a frame to
// dst, a multicast GID, if the device joined that group; else -1.
func (ln *lane) mcastDst(dst ibv.GID) int {
	if !dst.IsMulticast() || !ln.d.group.McastAttached(dst) {
		return -1
	}
	return ln.d.mcastGIDIndex(dst)
}

// loopCopy queues a copy of ib, a finished multicast datagram, for the
// device's own QPs (deliverLoopback). With no loopback buffer free the
// copy is lost, as a full receive ring loses a datagram.
func (ln *lane) loopCopy(lp *loopPath, ib []byte) {
	if len(ln.loopFree) == 0 || len(ib) > cap(ln.loopFree[0]) {
		ln.ctr.LoopbackDrops.Add(1)
		return
	}
	buf := ln.loopFree[len(ln.loopFree)-1]
	ln.loopFree = ln.loopFree[:len(ln.loopFree)-1]
	n := copy(buf[:cap(buf)], ib)
	ln.loopQ = append(ln.loopQ, loopPacket{buf: buf, n: n, info: lp.info})
	q := &ln.loopQ[len(ln.loopQ)-1]
	lp.encap.writeIPHeader(q.net[:], lp.encap.TrafficClass, udpHeaderLen+n+header.ICRCLen)
	q.info.NetHeader = q.net[:lp.encap.ipHeaderLen()]
	ln.ctr.Loopback.Add(1)
}
