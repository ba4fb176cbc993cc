package hostif

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/hostif/internal/layoutgen"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// The layouts the host interface shares with the C provider have one
// source, provider/hostif.h: layoutgen generates ztypes_hostif.go from it
// and types_hostif.go. TestGeneratedLayoutsAreCurrent fails when the
// committed file is not what the generator makes now. TestLayoutsMatchC
// checks the result without the generator: it compiles a program that
// prints every field's offset and size of the C structs as the C compiler
// lays them out, and compares each with the Go side's (the bodies'
// encoding/binary layouts, the entries' offset constants): a field moved,
// resized, added or renamed on one side only fails it.

// goBody pairs a C struct of a control message body with the Go type
// encoding/binary lays out the same. Fields compare in order, by
// offset, size and name (lower case, underscores dropped), but for the
// names in renames (Go name: C name), where one C struct serves several
// bodies.
type goBody struct {
	c       string
	goType  any
	renames map[string]string
}

var goBodies = []goBody{
	{"sn_header", Header{}, nil},
	{"sn_handle", HandleRequest{}, nil},
	{"sn_handle", HandleReply{}, nil},
	{"sn_hello_reply", HelloReply{}, nil},
	{"sn_reg_mr_req", RegMRRequest{}, nil},
	{"sn_reg_mr_reply", RegMRReply{}, nil},
	{"sn_advise_mr_req", AdviseMRRequest{}, nil},
	{"sn_sge", AdviseSGE{}, nil},
	{"sn_rereg_mr_req", ReregMRRequest{}, nil},
	{"sn_create_cq_req", CreateCQRequest{}, nil},
	{"sn_create_cq_reply", CreateCQReply{}, nil},
	{"sn_resize_cq_req", ResizeCQRequest{}, nil},
	{"sn_resize_cq_reply", ResizeCQReply{}, nil},
	{"sn_create_qp_req", CreateQPRequest{}, nil},
	{"sn_create_qp_reply", CreateQPReply{}, nil},
	{"sn_modify_qp_req", ModifyQPRequest{}, nil},
	{"sn_create_ah_req", CreateAHRequest{}, nil},
	{"sn_query_port_reply", QueryPortReply{}, nil},
	{"sn_create_srq_req", CreateSRQRequest{}, nil},
	{"sn_create_tm_srq_req", CreateTMSRQRequest{}, nil},
	{"sn_srq_op_req", SRQOpRequest{}, nil},
	{"sn_create_srq_reply", CreateSRQReply{}, nil},
	{"sn_modify_srq_req", ModifySRQRequest{}, nil},
	{"sn_alloc_mw_req", AllocMWRequest{}, nil},
	{"sn_alloc_mw_reply", AllocMWReply{}, nil},
	{"sn_open_xrcd_req", OpenXRCDRequest{}, nil},
	{"sn_create_xrc_srq_req", CreateXRCSRQRequest{}, nil},
	{"sn_create_xrc_srq_reply", CreateXRCSRQReply{}, nil},
	{"sn_xrc_qp_req", XRCQPRequest{}, nil},
	{"sn_cm_create_id_req", CMCreateIDRequest{}, nil},
	{"sn_cm_bind_req", CMAddrRequest{}, nil},
	{"sn_cm_addr_reply", CMAddrReply{}, nil},
	{"sn_cm_resolve_addr_req", CMResolveAddrRequest{}, nil},
	{"sn_cm_id_timeout_req", CMResolveRouteRequest{}, nil},
	{"sn_cm_id_timeout_req", CMListenRequest{}, map[string]string{"Backlog": "timeout_ms"}},
	{"sn_cm_set_option_req", CMSetOptionRequest{}, nil},
	{"sn_cm_migrate_req", CMMigrateRequest{}, nil},
	{"sn_cm_create_qp_req", CMCreateQPRequest{}, nil},
	{"sn_cm_conn_param", CMConnParam{}, map[string]string{"Private": "private_data"}},
	{"sn_share_memory_req", ShareMemoryRequest{}, nil},
	{"sn_alloc_dm_req", AllocDMRequest{}, nil},
	{"sn_reg_dm_mr_req", RegDMMRRequest{}, nil},
	{"sn_cm_init_qp_attr_req", CMInitQPAttrRequest{}, nil},
	{"sn_cm_event", CMEvent{}, map[string]string{"Private": "private_data"}},
	{"sn_mcast_req", McastRequest{}, nil},
	{"sn_cm_mcast_req", CMMcastRequest{}, nil},
	{"sn_query_mr_reply", QueryMRReply{}, nil},
	{"sn_query_dm_reply", QueryDMReply{}, nil},
	{"sn_flow_spec", FlowSpec{}, nil},
	{"sn_create_rss_qp_req", CreateRSSQPRequest{}, map[string]string{"LogSize": "log_size"}},
	{"sn_create_flow_req", CreateFlowRequest{}, map[string]string{"NumSpecs": "num_specs"}},
}

// goEntry is a ring entry's field as the Go side places it: its offset
// constant and size.
type goEntry struct{ off, size int }

// goEntries are the ring entries, which the Go side reads and writes at
// hand offsets: every C field must be here, at the same place.
var goEntries = map[string]map[string]goEntry{
	"sn_header": {
		"op": {offHeaderOp, 2}, "version": {offHeaderVersion, 2}, "length": {offHeaderLength, 4},
		"seq": {offHeaderSeq, 4}, "status": {offHeaderStatus, 4},
	},
	"sn_send_entry": {
		"wr_id": {offSendWRID, 8}, "opcode": {offSendOpcode, 1}, "flags": {offSendFlags, 1},
		"count": {offSendCount, 2}, "imm": {offSendImm, 4}, "remote_addr": {offSendRemoteAddr, 8},
		"rkey": {offSendRKey, 4}, "reserved": {offSendReserved, 4}, "compare_add": {offSendCompareAdd, 8},
		"swap": {offSendSwap, 8}, "ah": {offSendAH, 4}, "remote_qpn": {offSendRemoteQPN, 4},
		"remote_qkey": {offSendRemoteQKey, 4}, "remote_srqn": {offSendRemoteSrqn, 4},
	},
	"sn_sge":        {"addr": {offSGEAddr, 8}, "length": {offSGELength, 4}, "lkey": {offSGELKey, 4}},
	"sn_recv_entry": {"wr_id": {offRecvWRID, 8}, "count": {offRecvCount, 4}, "reserved": {offRecvReserved, 4}},
	"sn_cq_entry": {
		"wr_id": {offCQWRID, 8}, "sequence": {offCQSequence, 4}, "status": {offCQStatus, 1},
		"opcode": {offCQOpcode, 1}, "flags": {offCQFlags, 1}, "sl": {offCQSL, 1}, "byte_len": {offCQByteLen, 4},
		"imm": {offCQImm, 4}, "qpn": {offCQQPN, 4}, "src_qp": {offCQSrcQP, 4}, "pkey_index": {offCQPKeyIndex, 2},
		"slid": {offCQSLID, 2}, "dlid_path_bits": {offCQDLIDPathBits, 1}, "network_type": {offCQNetworkType, 1},
		"discarded": {offCQDiscarded, 1}, "reserved": {offCQReserved, 1}, "timestamp": {offCQTimestamp, 8},
		"tm_tag": {offCQTmTag, 8}, "tm_priv": {offCQTmPriv, 4},
		"reserved2": {offCQReserved2, CQEntrySize - offCQReserved2},
	},
}

// goEntrySizes are the entries' fixed parts as the Go side has them.
var goEntrySizes = map[string]int{"sn_header": HeaderLen, "sn_send_entry": sendHeader, "sn_sge": sgeSize, "sn_recv_entry": recvHeader,
	"sn_cq_entry": CQEntrySize}

// cField is a field as the C compiler placed it.
type cField struct {
	name       string
	off, size  int
	structSize int
}

func TestLayoutsMatchC(t *testing.T) {
	header, err := filepath.Abs(filepath.Join("..", "provider", "hostif.h"))
	require.NoError(t, err)
	c := compileLayouts(t, header)
	for _, problem := range compareLayouts(c, goBodies, goEntries) {
		t.Error(problem)
	}
}

// generatedFile is the generator's output, committed.
const generatedFile = "ztypes_hostif.go"

func TestGeneratedLayoutsAreCurrent(t *testing.T) {
	committed, err := os.ReadFile(generatedFile)
	require.NoError(t, err)
	if d := staleness(committed, generateLayouts(t, filepath.Join("..", "provider"))); d != "" {
		t.Errorf("%s is not what go generate ./hostif makes now (run it, or make generate): %s", generatedFile, d)
	}
}

// generateLayouts runs the generator on types_hostif.go with the
// hostif.h of dir.
func generateLayouts(t *testing.T, dir string) []byte {
	t.Helper()
	out, err := layoutgen.Generate("types_hostif.go", "cc", []string{"-I", dir})
	require.NoError(t, err)
	return out
}

// staleness describes the first line where the committed file and the
// generator's output differ, or returns "" if they are the same.
func staleness(committed, generated []byte) string {
	c, g := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	for i := 0; i < max(len(c), len(g)); i++ {
		var cl, gl string
		if i < len(c) {
			cl = c[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if cl != gl || i >= len(c) || i >= len(g) {
			return fmt.Sprintf("line %d is %q, the generator's %q", i+1, cl, gl)
		}
	}
	return ""
}

// TestLayoutsCatchAOneSidedMove moves a field on one side only, each way
// that can happen with the Go side generated, and shows which checks find
// it: sn_create_qp_req's srq after max_inline in a copy of the C header
// (without regenerating), and CreateQPRequest's SRQ so in a copy of the
// generated file (edited by hand) and in a Go type compiled so; and the
// send entry's rkey offset in Go.
func TestLayoutsCatchAOneSidedMove(t *testing.T) {
	committed, err := os.ReadFile(generatedFile)
	require.NoError(t, err)

	t.Run("in the C header", func(t *testing.T) {
		src, err := os.ReadFile(filepath.Join("..", "provider", "hostif.h"))
		require.NoError(t, err)
		old := "uint32_t pd, type, send_cq, recv_cq, srq;\n\tuint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;"
		moved := "uint32_t pd, type, send_cq, recv_cq;\n\tuint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline, srq;"
		require.Contains(t, string(src), old, "the test's C field to move")
		dir := t.TempDir()
		header := filepath.Join(dir, "hostif.h")
		require.NoError(t, os.WriteFile(header, []byte(strings.Replace(string(src), old, moved, 1)), 0o644))
		problems := compareLayouts(compileLayouts(t, header), goBodies, goEntries)
		require.NotEmpty(t, problems, "a field moved in C only")
		require.Contains(t, strings.Join(problems, "\n"), "sn_create_qp_req")
		require.Contains(t, staleness(committed, generateLayouts(t, dir)), "SRQ", "the generated file, stale")
	})

	t.Run("in the generated file", func(t *testing.T) {
		edited := moveLine(t, string(committed), "\tCreateQPRequest struct {", "SRQ", "MaxInline")
		require.Contains(t, staleness([]byte(edited), generateLayouts(t, filepath.Join("..", "provider"))), "SRQ")
	})

	real, err := filepath.Abs(filepath.Join("..", "provider", "hostif.h"))
	require.NoError(t, err)
	c := compileLayouts(t, real)

	t.Run("in a compiled Go body", func(t *testing.T) {
		bodies := slices.Clone(goBodies)
		i := slices.IndexFunc(bodies, func(b goBody) bool { return b.c == "sn_create_qp_req" })
		bodies[i].goType = reorder(t, CreateQPRequest{}, "SRQ", "MaxInline")
		problems := compareLayouts(c, bodies, goEntries)
		require.NotEmpty(t, problems, "a field moved in Go only")
		require.Contains(t, problems[0], "sn_create_qp_req.srq")
	})

	t.Run("in a Go offset", func(t *testing.T) {
		entries := maps.Clone(goEntries)
		entries["sn_send_entry"] = maps.Clone(entries["sn_send_entry"])
		rkey := entries["sn_send_entry"]["rkey"]
		entries["sn_send_entry"]["rkey"] = goEntry{rkey.off + 4, rkey.size}
		problems := compareLayouts(c, goBodies, entries)
		require.Len(t, problems, 1, "a field moved in Go only: %v", problems)
		require.Contains(t, problems[0], "sn_send_entry.rkey")
	})
}

// moveLine moves the line of the block that begins with start whose first
// word is field to after the line whose first word is after.
func moveLine(t *testing.T, src, start, field, after string) string {
	t.Helper()
	lines := strings.Split(src, "\n")
	begin := slices.Index(lines, start)
	require.GreaterOrEqual(t, begin, 0, "no line %q", start)
	word := func(l string) string { return strings.Fields(l + " x")[0] }
	from := slices.IndexFunc(lines[begin:], func(l string) bool { return word(l) == field }) + begin
	require.Greater(t, from, begin, "no field %s after %q", field, start)
	line := lines[from]
	lines = slices.Delete(lines, from, from+1)
	to := slices.IndexFunc(lines[begin:], func(l string) bool { return word(l) == after }) + begin
	require.Greater(t, to, begin, "no field %s after %q", after, start)
	return strings.Join(slices.Insert(lines, to+1, line), "\n")
}

// reorder returns a zero value of a struct type like v's with field moved
// to after the field after.
func reorder(t *testing.T, v any, field, after string) any {
	t.Helper()
	typ := reflect.TypeOf(v)
	var fields []reflect.StructField
	var moved reflect.StructField
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Name == field {
			moved = f
		} else {
			fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type})
		}
	}
	require.NotEmpty(t, moved.Name, "no field %s in %T", field, v)
	i := slices.IndexFunc(fields, func(f reflect.StructField) bool { return f.Name == after })
	require.GreaterOrEqual(t, i, 0, "no field %s in %T", after, v)
	fields = slices.Insert(fields, i+1, reflect.StructField{Name: moved.Name, Type: moved.Type})
	return reflect.New(reflect.StructOf(fields)).Elem().Interface()
}

// compareLayouts returns every difference between the C layouts c and the
// Go side's, its bodies and entries.
func compareLayouts(c map[string][]cField, bodies []goBody, entries map[string]map[string]goEntry) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	paired := map[string]bool{}
	for _, b := range bodies {
		paired[b.c] = true
	}
	for name := range entries {
		paired[name] = true
	}
	for name := range c {
		if !paired[name] {
			bad("struct %s: no Go counterpart in the test's tables", name)
		}
	}
	for _, b := range bodies {
		cf, ok := c[b.c]
		if !ok {
			bad("struct %s: not in the C header", b.c)
			continue
		}
		gf := goFields(reflect.TypeOf(b.goType))
		if len(gf) != len(cf) {
			bad("%s has %d fields, Go's %T %d", b.c, len(cf), b.goType, len(gf))
			continue
		}
		for i, g := range gf {
			want := normalize(g.name)
			if r, ok := b.renames[g.name]; ok {
				want = normalize(r)
			}
			if normalize(cf[i].name) != want || cf[i].off != g.off || cf[i].size != g.size {
				bad("%s.%s at %d, %d bytes; Go's %T.%s at %d, %d bytes", b.c, cf[i].name, cf[i].off, cf[i].size,
					b.goType, g.name, g.off, g.size)
			}
		}
		if size := binary.Size(b.goType); cf[0].structSize != size {
			bad("%s is %d bytes, Go's %T %d", b.c, cf[0].structSize, b.goType, size)
		}
	}
	for name, fields := range entries {
		cf, ok := c[name]
		if !ok {
			bad("struct %s: not in the C header", name)
			continue
		}
		if len(cf) != len(fields) {
			bad("%s has %d fields, the Go side places %d", name, len(cf), len(fields))
		}
		for _, f := range cf {
			g, ok := fields[f.name]
			switch {
			case !ok:
				bad("%s.%s: the Go side does not place it", name, f.name)
			case g.off != f.off || g.size != f.size:
				bad("%s.%s at %d, %d bytes; Go's at %d, %d bytes", name, f.name, f.off, f.size, g.off, g.size)
			}
		}
		if cf[0].structSize != goEntrySizes[name] {
			bad("%s is %d bytes, Go's %d", name, cf[0].structSize, goEntrySizes[name])
		}
	}
	return problems
}

// goField is a Go body's field as encoding/binary lays it out.
type goField struct {
	name      string
	off, size int
}

func goFields(t reflect.Type) []goField {
	var fields []goField
	off := 0
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		size := binary.Size(reflect.Zero(f.Type).Interface())
		fields = append(fields, goField{name: f.Name, off: off, size: size})
		off += size
	}
	return fields
}

func normalize(name string) string { return strings.ToLower(strings.ReplaceAll(name, "_", "")) }

// compileLayouts builds and runs a C program that prints every field of
// the header's packed structs: struct, field, offset, size, struct size.
func compileLayouts(t *testing.T, header string) map[string][]cField {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		require.Fail(t, "no C compiler", "apt-get install gcc: %v", err)
	}
	src, err := os.ReadFile(header)
	require.NoError(t, err)
	structs := parseStructs(t, string(src))
	var prog strings.Builder
	fmt.Fprintf(&prog, "#include <stdio.h>\n#include <stddef.h>\n#include %q\nint main(void) {\n", header)
	for _, s := range structs {
		for _, f := range s.fields {
			fmt.Fprintf(&prog, "\tprintf(\"%s %s %%zu %%zu %%zu\\n\", offsetof(struct %s, %s), sizeof(((struct %s *)0)->%s), sizeof(struct %s));\n",
				s.name, f, s.name, f, s.name, f, s.name)
		}
	}
	prog.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	cfile, bin := filepath.Join(dir, "layouts.c"), filepath.Join(dir, "layouts")
	require.NoError(t, os.WriteFile(cfile, []byte(prog.String()), 0o644))
	out, err := exec.Command("cc", "-Wall", "-Werror", "-o", bin, cfile).CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	layouts := map[string][]cField{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		require.Len(t, w, 5, "layout line %q", sc.Text())
		n := make([]int, 3)
		for i := range n {
			n[i], err = strconv.Atoi(w[2+i])
			require.NoError(t, err)
		}
		layouts[w[0]] = append(layouts[w[0]], cField{name: w[1], off: n[0], size: n[1], structSize: n[2]})
	}
	return layouts
}

// cStruct is a struct of the header: its name and its fields in order.
type cStruct struct {
	name   string
	fields []string
}

var (
	structRE  = regexp.MustCompile(`(?s)struct (sn_\w+) \{(.*?)\} __attribute__\(\(packed\)\);`)
	commentRE = regexp.MustCompile(`(?s)/\*.*?\*/`)
	declRE    = regexp.MustCompile(`^(?:struct \w+|u?int\d+_t)\s+(.+)$`)
	nameRE    = regexp.MustCompile(`^(\w+)(?:\[\w+\])?$`)
)

// parseStructs reads the packed structs of a header in the shape
// provider/hostif.h writes them: a declaration of one type and one or
// more names (arrays allowed) a line.
func parseStructs(t *testing.T, src string) []cStruct {
	t.Helper()
	var structs []cStruct
	for _, m := range structRE.FindAllStringSubmatch(src, -1) {
		s := cStruct{name: m[1]}
		for _, decl := range strings.Split(commentRE.ReplaceAllString(m[2], ""), ";") {
			decl = strings.TrimSpace(decl)
			if decl == "" {
				continue
			}
			d := declRE.FindStringSubmatch(decl)
			require.NotNil(t, d, "struct %s: a declaration the test cannot read: %q", s.name, decl)
			for _, n := range strings.Split(d[1], ",") {
				nm := nameRE.FindStringSubmatch(strings.TrimSpace(n))
				require.NotNil(t, nm, "struct %s: a name the test cannot read: %q", s.name, n)
				s.fields = append(s.fields, nm[1])
			}
		}
		structs = append(structs, s)
	}
	require.NotEmpty(t, structs, "no packed structs in the header")
	return structs
}

// The multicast limits the C provider reports are the ones the engine
// enforces (package ibv's), so the two copies cannot drift apart.
func TestMcastLimitsAgree(t *testing.T) {
	require.EqualValues(t, ibv.MaxMcastGroups, MaxMcastGroups)
	require.EqualValues(t, ibv.MaxMcastQPAttach, MaxMcastQPAttach)
}

// The tag matching limits the C provider reports are the engine's.
func TestTMLimitsAgree(t *testing.T) {
	require.EqualValues(t, ibv.MaxTMTags, TMMaxNumTags)
	require.EqualValues(t, ibv.MaxTMOps, TMMaxOps)
	require.EqualValues(t, ibv.MaxTMSGE, TMMaxSGE)
	require.EqualValues(t, ibv.MaxTMRndvHdrSize, TMMaxRndvHdrSize)
}
