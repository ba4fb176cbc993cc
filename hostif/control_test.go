package hostif

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A query_resources reply with every record filled fits one control
// message, at the size docs/HOST-INTERFACE.md gives, and decodes to what
// was encoded.
func TestResourcesReplyRoundTrip(t *testing.T) {
	var r ResourcesReply
	r.Sessions, r.Count = 40, ResourcesPerReply
	r.Total = ResourceCounts{PD: 1, CQ: 2, QP: 3, MR: 4, SRQ: 5, AH: 6, Channel: 7}
	for i := range r.Session {
		s := &r.Session[i]
		s.ID, s.PID = uint32(i+1), uint32(1000+i)
		copy(s.Comm[:], "softnic")
		s.Counts = ResourceCounts{PD: uint32(i), QP: 2 * uint32(i)}
	}
	buf := make([]byte, MaxMessage)
	msg, err := Encode(buf, Header{Op: OpQueryResources, Seq: 3}, r)
	require.NoError(t, err)
	require.Len(t, msg, HeaderLen+8+32+ResourcesPerReply*64)
	h, err := DecodeHeader(msg)
	require.NoError(t, err)
	require.Equal(t, OpQueryResources, h.Op)
	require.Equal(t, "query_resources", h.Op.String())
	var got ResourcesReply
	require.NoError(t, DecodeBody(msg, &got))
	require.Equal(t, r, got)

	req, err := Encode(buf, Header{Op: OpQueryResources}, ResourcesRequest{After: 9})
	require.NoError(t, err)
	require.Len(t, req, HeaderLen+8)
}

// The ops keep the numbers docs/HOST-INTERFACE.md gives them.
func TestOpNumbers(t *testing.T) {
	names := []string{"hello", "alloc_pd", "dealloc_pd", "reg_mr", "dereg_mr", "create_comp_channel", "create_cq",
		"destroy_cq", "create_qp", "modify_qp", "destroy_qp", "create_ah", "destroy_ah", "query_port", "query_gid",
		"create_srq", "modify_srq", "destroy_srq", "query_resources"}
	for i, n := range names {
		require.Equal(t, n, Op(i+1).String(), "op %d", i+1)
	}
	require.Equal(t, Op(19), OpQueryResources)
	require.Equal(t, "op(20)", Op(20).String())
}
