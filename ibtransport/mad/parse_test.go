package mad_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/mad"
)

var parseErrors = []error{
	mad.ErrTruncated, mad.ErrBadBaseVersion, mad.ErrBadClass, mad.ErrBadClassVersion,
	mad.ErrUnknownMethod, mad.ErrUnknownAttribute, mad.ErrPrivateDataTooLong, mad.ErrBadARILength,
}

// corrupted returns variants of a good MAD that Parse must refuse, each with
// the error it must give.
func corrupted(good []byte) map[string]struct {
	b   []byte
	err error
} {
	with := func(off int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[off] = v
		return b
	}
	rej := with(17, byte(mad.AttrREJ))
	rej[33] = 0xfe // an ARI length of 127
	sidrRep := with(17, byte(mad.AttrSIDRREP))
	sidrRep[29] = mad.SIDRInfoLen + 1
	return map[string]struct {
		b   []byte
		err error
	}{
		"empty":            {nil, mad.ErrTruncated},
		"header only":      {good[:mad.HeaderLen], mad.ErrTruncated},
		"one short":        {good[:mad.Len-1], mad.ErrTruncated},
		"one long":         {append(append([]byte(nil), good...), 0), mad.ErrPrivateDataTooLong},
		"OPA base":         {with(0, 0x80), mad.ErrBadBaseVersion},
		"SA class":         {with(1, 0x03), mad.ErrBadClass},
		"class version 1":  {with(2, 1), mad.ErrBadClassVersion},
		"GET":              {with(3, 0x01), mad.ErrUnknownMethod},
		"response bit":     {with(3, 0x83), mad.ErrUnknownMethod},
		"LAP":              {with(17, byte(mad.AttrLAP)), mad.ErrUnknownAttribute},
		"attr 0x0110":      {with(16, 1), mad.ErrUnknownAttribute},
		"REJ ARI 127":      {rej, mad.ErrBadARILength},
		"SIDR_REP info 73": {sidrRep, mad.ErrBadARILength},
	}
}

func TestParseRefuses(t *testing.T) {
	good := mad.MAD(capturedMADs(t, rpingCapture)[0].pkt.Payload)
	for name, c := range corrupted(good) {
		t.Run(name, func(t *testing.T) {
			m, err := mad.Parse(c.b)
			assert.ErrorIs(t, err, c.err)
			assert.Nil(t, m)
		})
	}
	m, err := mad.Parse(good)
	require.NoError(t, err)
	assert.Equal(t, []byte(good), []byte(m))
}

func TestParseAllocatesNothing(t *testing.T) {
	good := capturedMADs(t, rpingCapture)[0].pkt.Payload
	bad := append([]byte(nil), good...)
	bad[2] = 9
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = mad.Parse(good)
		_, _ = mad.Parse(bad)
	})
	assert.Zero(t, allocs)
}

// FuzzParse feeds Parse the captured MADs and variants of them: it never
// panics, refuses with one of its sentinels, and every view of a MAD it
// accepts can be read whole.
func FuzzParse(f *testing.F) {
	for _, c := range capturedMADs(f, rpingCapture) {
		f.Add(c.pkt.Payload)
		for _, v := range corrupted(c.pkt.Payload) {
			f.Add(v.b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := mad.Parse(b)
		if err != nil {
			require.True(t, isParseError(err), "unexpected error %v", err)
			return
		}
		require.Len(t, m, mad.Len)
		readAll(m)
	})
}

func isParseError(err error) bool {
	for _, e := range parseErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// readAll reads every field of m's message, as a receiver would.
func readAll(m mad.MAD) {
	switch m.Header().AttrID() {
	case mad.AttrREQ:
		r := mad.REQ(m)
		_ = r.CMAHeader().Check()
		_, _ = r.CMAHeader().SrcAddr(), r.CMAHeader().DstAddr()
		_, _ = r.PrimaryPath().LocalGID(), r.AlternatePath().FlowLabel()
		_ = r.PrivateData()
	case mad.AttrMRA:
		_ = mad.MRA(m).PrivateData()
	case mad.AttrREJ:
		_, _ = mad.REJ(m).ARI(), mad.REJ(m).PrivateData()
	case mad.AttrREP:
		_ = mad.REP(m).PrivateData()
	case mad.AttrRTU:
		_ = mad.RTU(m).PrivateData()
	case mad.AttrDREQ:
		_ = mad.DREQ(m).PrivateData()
	case mad.AttrDREP:
		_ = mad.DREP(m).PrivateData()
	case mad.AttrSIDRREQ:
		r := mad.SIDRREQ(m)
		_, _, _ = r.RequestID(), r.ServiceID(), r.PrivateData()
	case mad.AttrSIDRREP:
		r := mad.SIDRREP(m)
		_, _, _, _ = r.Status(), r.QPN(), r.QKey(), r.PrivateData()
	}
}
