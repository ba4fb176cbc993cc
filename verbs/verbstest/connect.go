// Package verbstest holds helpers for tests of packages above verbs.
package verbstest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// ConnectRC moves two RC QPs to RTS, each connected to the other (qa's
// device at addrA, qb's at addrB); the first error of moving them to RTR
// comes back (such as a path MTU the link cannot carry).
func ConnectRC(t *testing.T, qa, qb *verbs.QP, addrA, addrB netip.Addr, mtu ibtransport.MTU) error {
	t.Helper()
	var firstErr error
	for _, s := range []struct {
		q, peer *verbs.QP
		gid     ibtransport.GID
	}{{qa, qb, roce.GIDFromAddr(addrB)}, {qb, qa, roce.GIDFromAddr(addrA)}} {
		require.NoError(t, s.q.Modify(&ibtransport.QPAttr{State: ibtransport.QPSInit, AccessFlags: ibtransport.AccessRemoteWrite},
			ibtransport.QPAttrState|ibtransport.QPAttrAccessFlags))
		err := s.q.Modify(&ibtransport.QPAttr{State: ibtransport.QPSRTR, PathMTU: mtu, DestQPN: s.peer.QPN(), RQPSN: 7,
			MaxDestRdAtomic: 1, AV: ibtransport.AddressVector{DGID: s.gid, HopLimit: 64}},
			ibtransport.QPAttrState|ibtransport.QPAttrAV|ibtransport.QPAttrPathMTU|ibtransport.QPAttrDestQPN|
				ibtransport.QPAttrRQPSN|ibtransport.QPAttrMaxDestRdAtomic|ibtransport.QPAttrMinRNRTimer)
		if err != nil {
			firstErr = err
			continue
		}
		require.NoError(t, s.q.Modify(&ibtransport.QPAttr{State: ibtransport.QPSRTS, SQPSN: 7, Timeout: 20, RetryCnt: 7,
			RNRRetry: 7, MaxRdAtomic: 1}, ibtransport.QPAttrState|ibtransport.QPAttrSQPSN|ibtransport.QPAttrTimeout|
			ibtransport.QPAttrRetryCnt|ibtransport.QPAttrRNRRetry|ibtransport.QPAttrMaxQPRdAtomic))
	}
	return firstErr
}
