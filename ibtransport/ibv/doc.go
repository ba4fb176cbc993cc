// Package ibv is the verbs vocabulary: the plain types that cross between
// a program, the verbs API and whichever backend runs its QPs (the
// transport engine, package ibtransport, or a daemon through its client),
// each named after its libibverbs original (ibv_send_wr is SendWR,
// ibv_qp_attr is QPAttr, ibv_ah is AH). Work requests and their
// scatter/gather lists, completions, access rights, GIDs, MTUs, QP
// attributes, types and states, address vectors, the device's limits, the
// errors the verbs calls return, and CheckSendWR, the one check of a send
// work request every backend makes at post time. The counters the engine
// keeps (Counters, QPCounters) are here too, so that their readers need
// not import it.
//
// Package verbs gives these types their libibverbs names again
// (verbs.SendWR is ibv.SendWR); the engine and the daemon's host
// interface use them directly. Nothing here holds engine state: an AH
// holds its backend's state opaquely (AH.Backend).
//
// A backend checks a send work request as it is posted, and a caller
// matches the errors with errors.Is:
//
//	lim := ibv.SendLimits{MaxSGE: 1, MaxInline: 64}
//	wr := ibv.SendWR{Opcode: ibv.WRRDMARead, SGL: sgl}
//	if err := ibv.CheckSendWR(ibv.QPTypeUD, lim, &wr); err != nil {
//		return err // errors.Is(err, ibv.ErrInvalidArgument): no READ on UD
//	}
package ibv
