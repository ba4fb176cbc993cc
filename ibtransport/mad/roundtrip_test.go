package mad_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/mad"
)

// newMAD returns a fresh MAD with the header of src's attribute and TID.
func newMAD(src mad.MAD) mad.MAD {
	m := make(mad.MAD, mad.Len)
	m.InitCM(src.Header().AttrID(), src.Header().TID())
	return m
}

func buildREQ(src mad.REQ) mad.MAD {
	m := newMAD(mad.MAD(src))
	r := mad.REQ(m)
	r.SetLocalCommID(src.LocalCommID())
	r.SetServiceID(src.ServiceID())
	r.SetLocalCAGUID(src.LocalCAGUID())
	r.SetLocalQKey(src.LocalQKey())
	r.SetLocalQPN(src.LocalQPN())
	r.SetResponderResources(src.ResponderResources())
	r.SetInitiatorDepth(src.InitiatorDepth())
	r.SetRemoteCMResponseTimeout(src.RemoteCMResponseTimeout())
	r.SetTransportServiceType(src.TransportServiceType())
	r.SetEndToEndFlowControl(src.EndToEndFlowControl())
	r.SetStartingPSN(src.StartingPSN())
	r.SetLocalCMResponseTimeout(src.LocalCMResponseTimeout())
	r.SetRetryCount(src.RetryCount())
	r.SetPKey(src.PKey())
	r.SetPathMTU(src.PathMTU())
	r.SetRDCExists(src.RDCExists())
	r.SetRNRRetryCount(src.RNRRetryCount())
	r.SetMaxCMRetries(src.MaxCMRetries())
	r.SetSRQ(src.SRQ())
	r.SetExtendedTransportType(src.ExtendedTransportType())
	copyPath(r.PrimaryPath(), src.PrimaryPath())
	copyPath(r.AlternatePath(), src.AlternatePath())
	r.SetSAPSupported(src.SAPSupported())
	h, sh := r.CMAHeader(), src.CMAHeader()
	h.SetVersion(sh.Version())
	h.SetSrcPort(sh.SrcPort())
	h.SetAddrs(sh.SrcAddr(), sh.DstAddr())
	return m
}

func copyPath(p, src mad.Path) {
	p.SetLocalLID(src.LocalLID())
	p.SetRemoteLID(src.RemoteLID())
	p.SetLocalGID(src.LocalGID())
	p.SetRemoteGID(src.RemoteGID())
	p.SetFlowLabel(src.FlowLabel())
	p.SetPacketRate(src.PacketRate())
	p.SetTrafficClass(src.TrafficClass())
	p.SetHopLimit(src.HopLimit())
	p.SetSL(src.SL())
	p.SetSubnetLocal(src.SubnetLocal())
	p.SetLocalACKTimeout(src.LocalACKTimeout())
}

// commMessage is what every message but REQ has: two communication IDs and
// private data.
type commMessage interface {
	LocalCommID() uint32
	SetLocalCommID(uint32)
	RemoteCommID() uint32
	SetRemoteCommID(uint32)
	PrivateData() []byte
	SetPrivateData([]byte) error
}

func copyComm(dst, src commMessage) {
	dst.SetLocalCommID(src.LocalCommID())
	dst.SetRemoteCommID(src.RemoteCommID())
	must(dst.SetPrivateData(src.PrivateData()))
}

func buildREP(src mad.REP) mad.MAD {
	m := newMAD(mad.MAD(src))
	r := mad.REP(m)
	copyComm(r, src)
	r.SetLocalQKey(src.LocalQKey())
	r.SetLocalQPN(src.LocalQPN())
	r.SetStartingPSN(src.StartingPSN())
	r.SetResponderResources(src.ResponderResources())
	r.SetInitiatorDepth(src.InitiatorDepth())
	r.SetTargetACKDelay(src.TargetACKDelay())
	r.SetFailoverAccepted(src.FailoverAccepted())
	r.SetEndToEndFlowControl(src.EndToEndFlowControl())
	r.SetRNRRetryCount(src.RNRRetryCount())
	r.SetSRQ(src.SRQ())
	r.SetLocalCAGUID(src.LocalCAGUID())
	return m
}

func buildDREQ(src mad.DREQ) mad.MAD {
	m := newMAD(mad.MAD(src))
	copyComm(mad.DREQ(m), src)
	mad.DREQ(m).SetRemoteQPN(src.RemoteQPN())
	return m
}

// buildComm builds an RTU or a DREP, which hold nothing else.
func buildComm[T interface {
	~[]byte
	commMessage
}](src T) mad.MAD {
	m := newMAD(mad.MAD(src))
	copyComm(T(m), src)
	return m
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// TestRpingRoundTrip builds each captured message from the values read out of
// it and gets the captured bytes back.
func TestRpingRoundTrip(t *testing.T) {
	x := loadRping(t)
	assert.Equal(t, []byte(x.req), []byte(buildREQ(mad.REQ(x.req))), "REQ")
	assert.Equal(t, []byte(x.rep), []byte(buildREP(mad.REP(x.rep))), "REP")
	assert.Equal(t, []byte(x.rtu), []byte(buildComm(mad.RTU(x.rtu))), "RTU")
	assert.Equal(t, []byte(x.dreq), []byte(buildDREQ(mad.DREQ(x.dreq))), "DREQ")
	assert.Equal(t, []byte(x.drep), []byte(buildComm(mad.DREP(x.drep))), "DREP")
	for _, m := range []mad.MAD{x.req, x.rep, x.rtu, x.dreq, x.drep} {
		_, err := mad.Parse(m)
		require.NoError(t, err)
	}
}
