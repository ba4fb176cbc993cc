package ibv

import (
	"errors"
	"net/netip"
)

// Multicast limits of a device (ibv_device_attr's max_mcast_grp,
// max_mcast_qp_attach and max_total_mcast_qp_attach): rxe's per-group
// bound, and groups enough for an MPI job's or a pub-sub bus's.
const (
	MaxMcastGroups        = 1024
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = MaxMcastGroups * MaxMcastQPAttach
)

// MulticastQPN is the destination QP number of a datagram to a multicast
// group (IBA 9.8.1): every QP attached to the packet's DGID receives it.
const MulticastQPN = 0xFFFFFF

// ErrMcastLimit is the error of an attach past one of the multicast
// limits (rxe's ENOMEM).
var ErrMcastLimit = errors.New("ibv: multicast limit reached")

// IsMulticast reports whether g is a multicast GID: an IPv6 multicast
// address (ff00::/8) or an IPv4-mapped one in 224.0.0.0/4, as Linux's
// rdma_is_multicast_addr decides.
func (g GID) IsMulticast() bool {
	a := netip.AddrFrom16(g)
	if a.Is4In6() {
		return a.Unmap().IsMulticast()
	}
	return g[0] == 0xff
}
