package hostif

import (
	"encoding/binary"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A query_resources reply with every record filled fits one control
// message, at the size docs/HOST-INTERFACE.md gives, and decodes to what
// was encoded.
func TestResourcesReplyRoundTrip(t *testing.T) {
	var r ResourcesReply
	r.Sessions, r.Count = 40, ResourcesPerReply
	r.Total = ResourceCounts{PD: 1, CQ: 2, QP: 3, MR: 4, SRQ: 5, AH: 6, Channel: 7, CMID: 8}
	for i := range r.Session {
		s := &r.Session[i]
		s.ID, s.PID = uint32(i+1), uint32(1000+i)
		copy(s.Comm[:], "softnic")
		s.Counts = ResourceCounts{PD: uint32(i), QP: 2 * uint32(i), CMID: 3 * uint32(i)}
		s.Listening = uint32(i % 2)
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
		"create_srq", "modify_srq", "destroy_srq", "query_resources", "cm_create_channel", "cm_create_id", "cm_bind",
		"cm_resolve_addr", "cm_resolve_route", "cm_create_qp", "cm_connect", "cm_listen", "cm_accept", "cm_reject",
		"cm_disconnect", "cm_destroy_id", "cm_get_event", "cm_query_addr", "cm_detach_qp", "share_memory",
		"unshare_memory", "query_counters", "cm_set_option", "cm_migrate_id", "cm_init_qp_attr", "cm_establish",
		"query_cm_ids", "destroy_comp_channel", "cm_destroy_channel", "advise_mr", "rereg_mr"}
	for i, n := range names {
		require.Equal(t, n, Op(i+1).String(), "op %d", i+1)
	}
	require.Equal(t, Op(19), OpQueryResources)
	require.Equal(t, Op(20), OpCMCreateChannel)
	require.Equal(t, Op(34), OpCMDetachQP)
	require.Equal(t, Op(36), OpUnshareMemory)
	require.Equal(t, Op(37), OpQueryCounters)
	require.Equal(t, Op(38), OpCMSetOption)
	require.Equal(t, Op(39), OpCMMigrateID)
	require.Equal(t, Op(40), OpCMInitQPAttr)
	require.Equal(t, Op(41), OpCMEstablish)
	require.Equal(t, Op(42), OpQueryCMIDs)
	require.Equal(t, "query_cm_ids", OpQueryCMIDs.String())
	require.Equal(t, Op(43), OpDestroyCompChannel)
	require.Equal(t, Op(44), OpCMDestroyChannel)
	require.Equal(t, "cm_destroy_channel", OpCMDestroyChannel.String())
	require.Equal(t, Op(45), OpAdviseMR)
	require.Equal(t, Op(46), OpReregMR)
	require.Equal(t, Op(47), OpResizeCQ)
	require.Equal(t, "resize_cq", OpResizeCQ.String())
	require.Equal(t, Op(50), OpAllocDM)
	require.Equal(t, "alloc_dm", OpAllocDM.String())
	require.Equal(t, Op(51), OpFreeDM)
	require.Equal(t, Op(52), OpRegDMMR)
	require.Equal(t, "reg_dm_mr", OpRegDMMR.String())
	require.Equal(t, Op(48), OpAllocMW)
	require.Equal(t, Op(49), OpDeallocMW)
	require.Equal(t, "alloc_mw", OpAllocMW.String())
	require.Equal(t, "dealloc_mw", OpDeallocMW.String())
	require.Equal(t, Op(85), OpQueryPD)
	require.Equal(t, Op(86), OpQueryMR)
	require.Equal(t, Op(87), OpQueryDM)
	require.Equal(t, "query_dm", OpQueryDM.String())
	require.Equal(t, Op(70), OpCreateFlow)
	require.Equal(t, Op(71), OpDestroyFlow)
	require.Equal(t, Op(72), OpCreateRSSQP)
	require.Equal(t, "create_flow", OpCreateFlow.String())
	require.Equal(t, "destroy_flow", OpDestroyFlow.String())
	require.Equal(t, "create_rss_qp", OpCreateRSSQP.String())
}

// Every enumerator of enum sn_op has its Op constant in types_hostif.go,
// named after it (SN_OP_CM_CREATE_CHANNEL: OpCMCreateChannel), and no
// other constant is an Op: a command added to the header only, or a Go
// name paired with another command's enumerator, fails it.
func TestOpsAreTheEnums(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "types_hostif.go", nil, 0)
	require.NoError(t, err)
	paired := map[string]string{} // C enumerator: Go name
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if typ, ok := v.Type.(*ast.Ident); !ok || typ.Name != "Op" {
				continue
			}
			sel, ok := v.Values[0].(*ast.SelectorExpr)
			require.True(t, ok, "%s: not a C reference", v.Names[0].Name)
			paired[sel.Sel.Name] = v.Names[0].Name
		}
	}
	var enum []string
	for _, n := range opNames {
		if n != "" {
			enum = append(enum, "SN_OP_"+strings.ToUpper(n))
		}
	}
	require.ElementsMatch(t, enum, slices.Collect(maps.Keys(paired)))
	squash := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	for c, goName := range paired {
		require.Equal(t, squash(strings.TrimPrefix(c, "SN_OP_")), squash(strings.TrimPrefix(goName, "Op")),
			"%s = C.%s", goName, c)
	}
}

// query_cm_ids' bodies have the sizes docs/HOST-INTERFACE.md gives them,
// and a reply fits a message.
func TestCMIDsBodies(t *testing.T) {
	require.Equal(t, 8, binary.Size(CMIDsRequest{}))
	require.Equal(t, 76, binary.Size(CMIDRecord{}))
	require.Equal(t, 8+CMIDsPerReply*76, binary.Size(CMIDsReply{}))
	require.LessOrEqual(t, HeaderLen+binary.Size(CMIDsReply{}), MaxMessage)
}

// The CM's bodies have the sizes docs/HOST-INTERFACE.md gives them, and
// addresses go both ways.
func TestCMBodies(t *testing.T) {
	require.Equal(t, 304, binary.Size(CMEvent{}))
	require.Equal(t, 240, binary.Size(CMConnParam{}))
	require.Equal(t, 36, binary.Size(CMAddrReply{}))
	require.Equal(t, 44, binary.Size(CMResolveAddrRequest{}))
	require.Equal(t, 56, binary.Size(CMCreateQPRequest{}))
	for _, s := range []string{"10.0.0.1:7471", "[fe80::1]:1", "0.0.0.0:5"} {
		ap := netip.MustParseAddrPort(s)
		require.Equal(t, ap, CMAddrPort(CMAddr(ap.Addr()), ap.Port()))
	}
	require.False(t, CMAddrPort([16]byte{}, 0).IsValid())
}
