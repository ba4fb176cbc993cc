package layoutgen

import (
	"debug/dwarf"
	"fmt"
	"strings"
)

// goName is the Go name of field cField of a C struct that the Go
// declaration goDecl (a type, or a prefix of offsets) stands for: a
// rename, or cField's words capitalized, initialisms upper case
// (max_qp_wr: MaxQPWR, sgid_index: SGIDIndex, lkey: LKey).
func goName(goDecl, cField string) string {
	if n, ok := renames[goDecl+"."+cField]; ok {
		return n
	}
	var b strings.Builder
	for _, w := range strings.Split(cField, "_") {
		switch {
		case w == "":
		case initialisms[w]:
			b.WriteString(strings.ToUpper(w))
		case keys[w] != "":
			b.WriteString(keys[w])
		default:
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// initialisms are the words of hostif.h's field names that Go writes in
// capitals.
var initialisms = map[string]bool{
	"ah": true, "cq": true, "cqe": true, "dgid": true, "dlid": true, "gid": true, "guid": true, "id": true,
	"ms": true, "mtu": true, "pd": true, "psn": true, "qp": true, "qpn": true, "rnr": true, "rq": true,
	"sge": true, "sgid": true, "sl": true, "slid": true, "sq": true, "srq": true, "wr": true,
}

// keys are the key words, which Go writes as their letter and Key.
var keys = map[string]string{"lkey": "LKey", "rkey": "RKey", "qkey": "QKey", "pkey": "PKey"}

// renames are the fields whose Go names are not their C names' words
// (GoType.c_field: GoName): what a body that shares another's C struct
// uses the field for (a listen's backlog), or a shorter name.
var renames = map[string]string{
	"CMListenRequest.timeout_ms": "Backlog",
	"CMConnParam.private_data":   "Private",
	"CMEvent.private_data":       "Private",
}

// fieldTypes are the fields whose Go type is a named type of the package
// rather than the C field's integer type (GoType.c_field: Go type).
var fieldTypes = map[string]string{"Header.op": "Op"}

// maxEnumValue bounds the values of an enum whose names are an array.
const maxEnumValue = 1 << 12

// enumNames returns the names of an enum's enumerators indexed by their
// values ("" where there is none): each name without the prefix that all
// share, up to an underscore, in lower case. The values must be distinct,
// as an array's indexes are, and small.
func enumNames(vals []*dwarf.EnumValue) ([]string, error) {
	prefix := vals[0].Name
	for _, v := range vals[1:] {
		n := 0
		for n < len(prefix) && n < len(v.Name) && prefix[n] == v.Name[n] {
			n++
		}
		prefix = prefix[:n]
	}
	prefix = prefix[:strings.LastIndexByte(prefix, '_')+1]
	var names []string
	cNames := map[int64]string{}
	for _, v := range vals {
		if v.Val < 0 || v.Val >= maxEnumValue {
			return nil, fmt.Errorf("%s is %d, not an index below %d", v.Name, v.Val, maxEnumValue)
		}
		name := strings.ToLower(strings.TrimPrefix(v.Name, prefix))
		if name == "" {
			return nil, fmt.Errorf("%s is all prefix", v.Name)
		}
		if other, ok := cNames[v.Val]; ok {
			return nil, fmt.Errorf("%s is %d, as %s is", v.Name, v.Val, other)
		}
		cNames[v.Val] = v.Name
		for int64(len(names)) <= v.Val {
			names = append(names, "")
		}
		names[v.Val] = name
	}
	return names, nil
}
