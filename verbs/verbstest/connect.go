// Package verbstest holds helpers for tests of packages above verbs.
package verbstest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// ConnectRC moves two RC QPs to RTS, each connected to the other (qa's
// device at addrA, qb's at addrB); the first error of moving them to RTR
// comes back (such as a path MTU the link cannot carry).
func ConnectRC(t *testing.T, qa, qb *verbs.QP, addrA, addrB netip.Addr, mtu ibv.MTU) error {
	t.Helper()
	var firstErr error
	for _, s := range []struct {
		q, peer *verbs.QP
		gid     ibv.GID
	}{{qa, qb, roce.GIDFromAddr(addrB)}, {qb, qa, roce.GIDFromAddr(addrA)}} {
		require.NoError(t, s.q.Modify(&ibv.QPAttr{State: ibv.QPSInit, AccessFlags: ibv.AccessRemoteWrite},
			ibv.QPAttrState|ibv.QPAttrAccessFlags))
		err := s.q.Modify(&ibv.QPAttr{State: ibv.QPSRTR, PathMTU: mtu, DestQPN: s.peer.QPN(), RQPSN: 7,
			MaxDestRdAtomic: 1, AV: ibv.AddressVector{DGID: s.gid, HopLimit: 64}},
			ibv.QPAttrState|ibv.QPAttrAV|ibv.QPAttrPathMTU|ibv.QPAttrDestQPN|
				ibv.QPAttrRQPSN|ibv.QPAttrMaxDestRdAtomic|ibv.QPAttrMinRNRTimer)
		if err != nil {
			firstErr = err
			continue
		}
		require.NoError(t, s.q.Modify(&ibv.QPAttr{State: ibv.QPSRTS, SQPSN: 7, Timeout: 20, RetryCnt: 7,
			RNRRetry: 7, MaxRdAtomic: 1}, ibv.QPAttrState|ibv.QPAttrSQPSN|ibv.QPAttrTimeout|
			ibv.QPAttrRetryCnt|ibv.QPAttrRNRRetry|ibv.QPAttrMaxQPRdAtomic))
	}
	return firstErr
}
