package mad_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/mad"
)

// TestSIDRFields sets every field of a SIDR_REQ and a SIDR_REP, checks
// the bytes IBA puts them at, and that Parse takes both back.
func TestSIDRFields(t *testing.T) {
	m := make(mad.MAD, mad.Len)
	m.InitCM(mad.AttrSIDRREQ, 7)
	req := mad.SIDRREQ(m)
	req.SetRequestID(0x01020304)
	req.SetPKey(0xffff)
	req.SetServiceID(0x0000000001114567)
	require.NoError(t, req.SetPrivateData(bytes.Repeat([]byte{0xaa}, mad.SIDRREQPrivateDataLen)))
	assert.ErrorIs(t, req.SetPrivateData(make([]byte, mad.SIDRREQPrivateDataLen+1)), mad.ErrPrivateDataTooLong)
	assert.Equal(t, []byte{1, 2, 3, 4, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 1, 0x11, 0x45, 0x67, 0xaa}, []byte(m[24:41]))
	got, err := mad.Parse(m)
	require.NoError(t, err)
	r := mad.SIDRREQ(got)
	assert.Equal(t, uint32(0x01020304), r.RequestID())
	assert.Equal(t, uint16(0xffff), r.PKey())
	assert.Equal(t, uint64(0x1114567), r.ServiceID())
	assert.Len(t, r.PrivateData(), 216)

	m.InitCM(mad.AttrSIDRREP, 7)
	rep := mad.SIDRREP(m)
	rep.SetRequestID(0x01020304)
	rep.SetStatus(mad.SIDRRejected)
	rep.SetQPN(0xabcdef)
	rep.SetServiceID(0x1114567)
	rep.SetQKey(0x01234567)
	require.NoError(t, rep.SetPrivateData([]byte{0x55}))
	assert.Equal(t, []byte{1, 2, 3, 4, 2, 0, 0, 0, 0xab, 0xcd, 0xef, 0}, []byte(m[24:36]))
	assert.Equal(t, []byte{1, 0x23, 0x45, 0x67}, []byte(m[44:48]))
	assert.Equal(t, byte(0x55), m[120])
	got, err = mad.Parse(m)
	require.NoError(t, err)
	p := mad.SIDRREP(got)
	assert.Equal(t, mad.SIDRRejected, p.Status())
	assert.Equal(t, uint32(0xabcdef), p.QPN())
	assert.Equal(t, uint32(0x01234567), p.QKey())
	assert.Equal(t, uint64(0x1114567), p.ServiceID())
	assert.Len(t, p.PrivateData(), 136)
	assert.True(t, mad.AttrSIDRREP.Supported())
}
