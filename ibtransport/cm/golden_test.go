package cm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/rocetest"
)

const rpingCapture = "../../roce/testdata/rxe-rping.pcap"

// capturedMAD is one MAD of a capture with the frame that carried it.
type capturedMAD struct {
	frame roce.Frame
	msg   mad.MAD
}

// loadMADs returns the MADs of a capture, in order.
func loadMADs(t testing.TB, path string) []capturedMAD {
	pkts, err := rocetest.ReadFile(path)
	require.NoError(t, err)
	var out []capturedMAD
	for _, p := range pkts {
		if mad.ToGSI(&p.IB) {
			out = append(out, capturedMAD{frame: p.Frame, msg: mad.MAD(p.IB.Payload)})
		}
	}
	return out
}

// rxeExchange is rxe's REQ, REP, RTU, DREQ and DREP from rxe-rping.pcap.
type rxeExchange struct{ req, rep, rtu, dreq, drep capturedMAD }

func loadRxe(t *testing.T) rxeExchange {
	mads := loadMADs(t, rpingCapture)
	require.Len(t, mads, 5)
	return rxeExchange{mads[0], mads[1], mads[2], mads[3], mads[4]}
}

// sameREQ compares every field of two REQs but the sender's comm ID and
// the transaction ID, which are random.
func sameREQ(t *testing.T, want, got mad.REQ) {
	t.Helper()
	assert.Equal(t, want.ServiceID(), got.ServiceID())
	assert.Equal(t, want.LocalCAGUID(), got.LocalCAGUID())
	assert.Equal(t, want.LocalQKey(), got.LocalQKey())
	assert.Equal(t, want.LocalQPN(), got.LocalQPN())
	assert.Equal(t, want.ResponderResources(), got.ResponderResources())
	assert.Equal(t, want.InitiatorDepth(), got.InitiatorDepth())
	assert.Equal(t, want.RemoteCMResponseTimeout(), got.RemoteCMResponseTimeout())
	assert.Equal(t, want.TransportServiceType(), got.TransportServiceType())
	assert.Equal(t, want.EndToEndFlowControl(), got.EndToEndFlowControl())
	assert.Equal(t, want.StartingPSN(), got.StartingPSN())
	assert.Equal(t, want.LocalCMResponseTimeout(), got.LocalCMResponseTimeout())
	assert.Equal(t, want.RetryCount(), got.RetryCount())
	assert.Equal(t, want.PKey(), got.PKey())
	assert.Equal(t, want.PathMTU(), got.PathMTU())
	assert.Equal(t, want.RDCExists(), got.RDCExists())
	assert.Equal(t, want.RNRRetryCount(), got.RNRRetryCount())
	assert.Equal(t, want.MaxCMRetries(), got.MaxCMRetries())
	assert.Equal(t, want.SRQ(), got.SRQ())
	assert.Equal(t, want.ExtendedTransportType(), got.ExtendedTransportType())
	// The paths whole: LIDs, GIDs, flow label, rate, TC, hop limit, SL,
	// subnet local, ACK timeout; the alternate one is empty on RoCE.
	assert.Equal(t, []byte(want.PrimaryPath()), []byte(got.PrimaryPath()))
	assert.Equal(t, []byte(want.AlternatePath()), []byte(got.AlternatePath()))
	assert.Equal(t, want.PrivateData(), got.PrivateData())
	sameHeader(t, mad.MAD(want), mad.MAD(got))
}

// sameHeader compares the MAD headers but for the transaction ID.
func sameHeader(t *testing.T, want, got mad.MAD) {
	t.Helper()
	w, g := want.Header(), got.Header()
	assert.Equal(t, w.BaseVersion(), g.BaseVersion())
	assert.Equal(t, w.MgmtClass(), g.MgmtClass())
	assert.Equal(t, w.ClassVersion(), g.ClassVersion())
	assert.Equal(t, w.Method(), g.Method())
	assert.Equal(t, w.Status(), g.Status())
	assert.Equal(t, w.ClassSpecific(), g.ClassSpecific())
	assert.Equal(t, w.AttrID(), g.AttrID())
	assert.Equal(t, w.AttrModifier(), g.AttrModifier())
}

// paramsOf returns the REQParams that make rxe's REQ.
func paramsOf(c capturedMAD) REQParams {
	r := mad.REQ(c.msg)
	p := r.PrimaryPath()
	return REQParams{
		Peer:     ibv.AddressVector{DGID: c.frame.DstGID(), HopLimit: c.frame.HopLimit},
		LocalGID: p.LocalGID(), PeerGID: p.RemoteGID(), ServiceID: r.ServiceID(),
		LocalQPN: r.LocalQPN(), StartingPSN: r.StartingPSN(),
		ResponderResources: r.ResponderResources(), InitiatorDepth: r.InitiatorDepth(),
		PathMTU: r.PathMTU(), RetryCount: r.RetryCount(), RNRRetryCount: r.RNRRetryCount(),
		Transport: r.TransportServiceType(), PrivateData: r.PrivateData()[:mad.CMAHeaderLen],
		TrafficClass: p.TrafficClass(), HopLimit: p.HopLimit(), FlowLabel: p.FlowLabel(),
	}
}

// sink is a Send that keeps what it is given.
type sink struct{ sent []mad.MAD }

func (s *sink) send(_ ibv.AddressVector, m mad.MAD) error {
	s.sent = append(s.sent, append(mad.MAD(nil), m...))
	return nil
}

func (s *sink) last(t *testing.T, a mad.AttrID) mad.MAD {
	t.Helper()
	require.NotEmpty(t, s.sent)
	m := s.sent[len(s.sent)-1]
	require.Equal(t, a, m.Header().AttrID())
	return m
}

// TestGoldenActiveSide plays rxe's client: with the parameters of the
// captured REQ our REQ has the same fields; fed rxe's REP (renamed to our
// ID) we send an RTU and then a DREQ laid out as rxe's.
func TestGoldenActiveSide(t *testing.T) {
	x := loadRxe(t)
	out := &sink{}
	req := mad.REQ(x.req.msg)
	m := New(Config{Send: out.send, CAGUID: req.LocalCAGUID()})
	defer m.Close()
	evs := make(chan Event, 8)
	c, err := m.Connect(paramsOf(x.req), func(e Event) { evs <- e })
	require.NoError(t, err)
	ours := mad.REQ(out.last(t, mad.AttrREQ))
	sameREQ(t, req, ours)
	assert.Equal(t, c.LocalID(), ours.LocalCommID())

	rep := append(mad.MAD(nil), x.rep.msg...)
	mad.REP(rep).SetRemoteCommID(c.LocalID())
	m.Receive(ibv.AddressVector{DGID: x.rep.frame.SrcGID()}, rep)
	ev := expect(t, evs, EventREPReceived)
	assert.Equal(t, mad.REP(rep).LocalQPN(), ev.RemoteQPN)
	assert.Equal(t, mad.REP(rep).StartingPSN(), ev.StartingPSN)
	assert.Equal(t, mad.REP(x.rep.msg).LocalCommID(), c.RemoteID())

	require.NoError(t, c.ReadyToUse(nil))
	rtu := mad.RTU(out.last(t, mad.AttrRTU))
	want := mad.RTU(x.rtu.msg)
	sameHeader(t, mad.MAD(want), mad.MAD(rtu))
	assert.Equal(t, want.RemoteCommID(), rtu.RemoteCommID())
	assert.Equal(t, c.LocalID(), rtu.LocalCommID())
	assert.Equal(t, want.PrivateData(), rtu.PrivateData())
	assert.Equal(t, mad.MAD(ours).Header().TID(), mad.MAD(rtu).Header().TID(), "the REQ's TID, as rxe's RTU")

	require.NoError(t, c.Disconnect(nil))
	dreq := mad.DREQ(out.last(t, mad.AttrDREQ))
	wantD := mad.DREQ(x.dreq.msg)
	sameHeader(t, mad.MAD(wantD), mad.MAD(dreq))
	assert.Equal(t, wantD.RemoteCommID(), dreq.RemoteCommID())
	assert.Equal(t, wantD.RemoteQPN(), dreq.RemoteQPN())
	assert.Equal(t, wantD.PrivateData(), dreq.PrivateData())

	drep := append(mad.MAD(nil), x.drep.msg...)
	mad.DREP(drep).SetRemoteCommID(c.LocalID())
	m.Receive(ibv.AddressVector{}, drep)
	expect(t, evs, EventDisconnected)
	assert.Equal(t, StateTimewait, c.State())
}

// TestGoldenPassiveSide plays rxe's server: fed rxe's REQ, accepting with
// the captured REP's values gives a REP with the same fields (and the
// REQ's TID); rxe's RTU establishes; rxe's DREQ (renamed) gets a DREP laid
// out as rxe's.
func TestGoldenPassiveSide(t *testing.T) {
	x := loadRxe(t)
	out := &sink{}
	want := mad.REP(x.rep.msg)
	m := New(Config{Send: out.send, CAGUID: want.LocalCAGUID()})
	defer m.Close()
	evs := make(chan Event, 8)
	_, err := m.Listen(mad.REQ(x.req.msg).ServiceID(), func(e Event) { evs <- e })
	require.NoError(t, err)
	m.Receive(ibv.AddressVector{DGID: x.req.frame.SrcGID()}, x.req.msg)
	ev := expect(t, evs, EventREQReceived)
	c := ev.Conn
	assert.Equal(t, x.req.frame.SrcGID(), ev.PeerGID)
	assert.Equal(t, mad.REQ(x.req.msg).PrivateData(), ev.PrivateData)

	require.NoError(t, c.Accept(REPParams{LocalQPN: want.LocalQPN(), StartingPSN: want.StartingPSN(),
		ResponderResources: want.ResponderResources(), InitiatorDepth: want.InitiatorDepth(),
		RNRRetryCount: want.RNRRetryCount(), FailoverAccepted: want.FailoverAccepted()}))
	rep := mad.REP(out.last(t, mad.AttrREP))
	sameHeader(t, mad.MAD(want), mad.MAD(rep))
	assert.Equal(t, mad.MAD(want).Header().TID(), mad.MAD(rep).Header().TID())
	assert.Equal(t, c.LocalID(), rep.LocalCommID())
	assert.Equal(t, want.RemoteCommID(), rep.RemoteCommID())
	assert.Equal(t, want.LocalQKey(), rep.LocalQKey())
	assert.Equal(t, want.LocalQPN(), rep.LocalQPN())
	assert.Equal(t, want.StartingPSN(), rep.StartingPSN())
	assert.Equal(t, want.ResponderResources(), rep.ResponderResources())
	assert.Equal(t, want.InitiatorDepth(), rep.InitiatorDepth())
	assert.Equal(t, want.TargetACKDelay(), rep.TargetACKDelay())
	assert.Equal(t, want.FailoverAccepted(), rep.FailoverAccepted())
	assert.Equal(t, want.EndToEndFlowControl(), rep.EndToEndFlowControl())
	assert.Equal(t, want.RNRRetryCount(), rep.RNRRetryCount())
	assert.Equal(t, want.SRQ(), rep.SRQ())
	assert.Equal(t, want.LocalCAGUID(), rep.LocalCAGUID())
	assert.Equal(t, want.PrivateData(), rep.PrivateData())
	// The bytes past the comm IDs are equal as a whole.
	assert.Equal(t, []byte(want[32:]), []byte(rep[32:]))

	rtu := append(mad.MAD(nil), x.rtu.msg...)
	mad.RTU(rtu).SetRemoteCommID(c.LocalID())
	m.Receive(ibv.AddressVector{}, rtu)
	expect(t, evs, EventRTUReceived)

	dreq := append(mad.MAD(nil), x.dreq.msg...)
	mad.DREQ(dreq).SetRemoteCommID(c.LocalID())
	m.Receive(ibv.AddressVector{}, dreq)
	expect(t, evs, EventDREQReceived)
	drep := mad.DREP(out.last(t, mad.AttrDREP))
	wantD := mad.DREP(x.drep.msg)
	sameHeader(t, mad.MAD(wantD), mad.MAD(drep))
	assert.Equal(t, mad.MAD(wantD).Header().TID(), mad.MAD(drep).Header().TID())
	assert.Equal(t, c.LocalID(), drep.LocalCommID())
	assert.Equal(t, wantD.RemoteCommID(), drep.RemoteCommID())
	assert.Equal(t, wantD.PrivateData(), drep.PrivateData())
}

// TestGoldenReject feeds rxe's REQ to port 7199 (rxe-cm-reject.pcap) to a
// Manager that listens on nothing: its REJ is rxe's kernel CM's, byte for
// byte (reason 8, the REQ rejected, the REQ's ID and transaction ID).
func TestGoldenReject(t *testing.T) {
	mads := loadMADs(t, "../../roce/testdata/rxe-cm-reject.pcap")
	require.Len(t, mads, 2)
	req, want := mads[0], mad.REJ(mads[1].msg)
	require.Equal(t, mad.AttrREJ, mad.MAD(want).Header().AttrID())
	out := &sink{}
	m := New(Config{Send: out.send})
	defer m.Close()
	m.Receive(ibv.AddressVector{DGID: req.frame.SrcGID()}, req.msg)
	got := mad.REJ(out.last(t, mad.AttrREJ))
	assert.Equal(t, mad.RejectInvalidServiceID, got.Reason())
	assert.Equal(t, mad.REQ(req.msg).LocalCommID(), got.RemoteCommID())
	assert.Equal(t, []byte(want), []byte(got))
}
