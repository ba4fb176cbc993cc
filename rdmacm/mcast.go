package rdmacm

import (
	"net/netip"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// Multicast (rdma_join_multicast, rdma_leave_multicast): a UD ID joins IP
// multicast groups on its device. On RoCEv2 the group's GID is its
// address, an IPv4 group mapped into IPv6 (::ffff:a.b.c.d) as Linux's
// cma_iboe_set_mgid makes it; the ID's QP is attached to it (unless the
// join is send-only) and EventMulticastJoin gives the address vector,
// QPN 0xFFFFFF and the Q_Key to send to the group with.

// JoinFlags are rdma_join_multicast_ex's join_flags.
type JoinFlags uint32

const (
	// JoinFullMember sends and receives (RDMA_MC_JOIN_FLAG_FULLMEMBER).
	JoinFullMember JoinFlags = 0
	// JoinSendOnlyFullMember only sends: the QP is not attached and the
	// interface does not join the group
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER).
	JoinSendOnlyFullMember JoinFlags = 1
)

// McastHopLimit is the hop limit (IPv4 TTL) of a group's address vector:
// the kernel's IPV6_DEFAULT_HOPLIMIT, which cma.c gives RoCEv2 groups.
const McastHopLimit = 64

// McastGID returns the multicast GID of group address a on RoCEv2.
func McastGID(a netip.Addr) verbs.GID { return roce.GIDFromAddr(a.Unmap()) }

// JoinMulticast joins the ID to the multicast group at addr (a UD ID of
// the UDP port space, bound to a device or with its address resolved);
// EventMulticastJoin, whose Group is addr and UD the group's address,
// follows. Joining a group the ID is in fails with ErrAddrInUse.
func (id *ID) JoinMulticast(addr netip.Addr, flags JoinFlags) error {
	addr = addr.Unmap()
	if !addr.IsMulticast() || flags > JoinSendOnlyFullMember {
		return ErrInvalidArgument
	}
	return id.be.JoinMulticast(addr, flags)
}

// LeaveMulticast leaves a group the ID joined (rdma_leave_multicast):
// its QP is detached from it. A group the ID is not in fails with
// ErrNoDevice (librdmacm's EADDRNOTAVAIL). Destroying the ID leaves its
// groups.
func (id *ID) LeaveMulticast(addr netip.Addr) error { return id.be.LeaveMulticast(addr.Unmap()) }

// mcastUDParam is EventMulticastJoin's UD parameter for group addr of a
// device's GID index gi.
func mcastUDParam(addr netip.Addr, gi int, tos uint8) *UDParam {
	return &UDParam{AV: verbs.AddressVector{DGID: McastGID(addr), SGIDIndex: uint8(gi), HopLimit: McastHopLimit,
		TrafficClass: tos}, QPN: ibv.MulticastQPN, QKey: UDPQKey}
}
