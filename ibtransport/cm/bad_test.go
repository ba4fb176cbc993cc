package cm

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/softnic/softnic/ibtransport/mad"
)

// TestBadMADsCounted feeds MADs Parse refuses and checks each is counted
// by its reason and changes nothing.
func TestBadMADsCounted(t *testing.T) {
	fx := newFixture(t)
	defer fx.m.Close()
	good := loadMADs(t, rpingCapture)[0].msg
	with := func(off int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[off] = v
		return b
	}
	rej := with(17, byte(mad.AttrREJ))
	rej[33] = 0xfe
	c := fx.m.Counters()
	goodIn := c.In.REQ.Load() + c.In.REP.Load() + c.In.RTU.Load() + c.In.DREQ.Load()
	for _, tc := range []struct {
		b       []byte
		counter func() uint64
	}{
		{nil, c.BadLength.Load},
		{good[:255], c.BadLength.Load},
		{append(append([]byte(nil), good...), 0), c.BadLength.Load},
		{with(0, 0x80), c.BadBaseVersion.Load},
		{with(1, 0x03), c.BadClass.Load},
		{with(2, 1), c.BadClassVersion.Load},
		{with(3, 0x83), c.BadMethod.Load},
		{with(17, byte(mad.AttrLAP)), c.BadAttribute.Load},
		{rej, c.BadARILength.Load},
	} {
		before, sent := tc.counter(), fx.sent
		fx.m.Receive(fixturePeer, tc.b)
		assert.Equal(t, before+1, tc.counter(), "% x", tc.b[:min(len(tc.b), 20)])
		assert.Equal(t, sent, fx.sent, "nothing answered")
	}
	assert.Equal(t, goodIn, c.In.REQ.Load()+c.In.REP.Load()+c.In.RTU.Load()+c.In.DREQ.Load())
	fx.check(t)
}

// TestDREQWithWrongIDs: a DREQ naming our ID but another peer ID is, to
// cm.c, for no connection: it gets a DREP and the connection stays.
func TestDREQWithWrongIDs(t *testing.T) {
	fx := newFixture(t)
	defer fx.m.Close()
	est := fx.conns[6]
	dreq := newMAD(mad.AttrDREQ, 3)
	mad.DREQ(dreq).SetRemoteCommID(est.localID)
	mad.DREQ(dreq).SetLocalCommID(est.remoteID + 1)
	sent := fx.sent
	fx.m.Receive(fixturePeer, dreq)
	assert.Equal(t, sent+1, fx.sent)
	assert.Equal(t, uint64(1), fx.m.Counters().Out.DREP.Load()-1, "the fixture's TIMEWAIT connection sent one before")
	assert.Equal(t, StateEstablished, est.State())
	// With the right IDs but another QPN it is dropped.
	mad.DREQ(dreq).SetLocalCommID(est.remoteID)
	mad.DREQ(dreq).SetRemoteQPN(0x41)
	fx.m.Receive(fixturePeer, dreq)
	assert.Equal(t, sent+1, fx.sent)
	assert.Equal(t, uint64(1), fx.m.Counters().IDMismatch.Load())
	assert.Equal(t, StateEstablished, est.State())
}
