package layoutgen

import "strings"

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
