package hostif

import (
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// ModifyQPRequestOf encodes ibv_modify_qp's arguments for QP handle (0 in
// a cm_init_qp_attr reply).
func ModifyQPRequestOf(handle uint32, attr *ibv.QPAttr, mask ibv.QPAttrMask) ModifyQPRequest {
	return ModifyQPRequest{Handle: handle, Mask: uint32(mask), State: uint8(attr.State),
		CurState: uint8(attr.CurState), PathMTU: uint8(attr.PathMTU), Port: attr.Port, Timeout: attr.Timeout,
		RetryCnt: attr.RetryCnt, RNRRetry: attr.RNRRetry, MinRNR: attr.MinRNRTimer, MaxRdAtomic: attr.MaxRdAtomic,
		MaxDestRdAtomic: attr.MaxDestRdAtomic, SGIDIndex: attr.AV.SGIDIndex, HopLimit: attr.AV.HopLimit,
		TrafficClass: attr.AV.TrafficClass, PKeyIndex: attr.PKeyIndex, Access: uint32(attr.AccessFlags),
		QKey: attr.QKey, DestQPN: attr.DestQPN, RQPSN: uint32(attr.RQPSN), SQPSN: uint32(attr.SQPSN),
		FlowLabel: attr.AV.FlowLabel, DGID: attr.AV.DGID}
}

// QPAttrOf decodes the attributes of req; req.Mask says which count.
func QPAttrOf(req *ModifyQPRequest) *ibv.QPAttr {
	return &ibv.QPAttr{State: ibv.QPState(req.State), CurState: ibv.QPState(req.CurState),
		AccessFlags: ibv.Access(req.Access), PKeyIndex: req.PKeyIndex, Port: req.Port,
		AV: ibv.AddressVector{DGID: req.DGID, SGIDIndex: req.SGIDIndex, FlowLabel: req.FlowLabel,
			HopLimit: req.HopLimit, TrafficClass: req.TrafficClass},
		PathMTU: ibv.MTU(req.PathMTU), Timeout: req.Timeout, RetryCnt: req.RetryCnt, RNRRetry: req.RNRRetry,
		RQPSN: header.PSN(req.RQPSN), SQPSN: header.PSN(req.SQPSN), MaxRdAtomic: req.MaxRdAtomic,
		MaxDestRdAtomic: req.MaxDestRdAtomic, MinRNRTimer: req.MinRNR, DestQPN: req.DestQPN, QKey: req.QKey}
}
