package layoutgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
)

// An input is a Go file in the shape of cgo -godefs' inputs: a package
// clause, a cgo preamble of #includes before import "C", and const, var
// and type declarations whose values and types are references to C:
//
//	const Version = C.SN_VERSION               // a macro or enum constant
//	const OpHello Op = C.SN_OP_HELLO           // the same, of a Go type
//	const sendHeader = C.sizeof_struct_sn_send_entry
//	const offSend = C.offsetof_struct_sn_send_entry // offSendWRID, ...
//	type HelloReply C.struct_sn_hello_reply   // the struct's fields
//	var opNames = C.names_enum_sn_op          // the enumerators' names
//
// An enum's names are an array of strings indexed by the enumerators'
// values: their names with the prefix common to all (up to an underscore)
// dropped, in lower case (SN_OP_ALLOC_PD: "alloc_pd").
//
// Every spec has one name and refers to C; the generator writes the
// declarations in order, with their comments, the references replaced.
type input struct {
	pkg      string
	preamble string
	decls    []decl
}

type decl struct {
	tok   token.Token // token.CONST, token.VAR or token.TYPE
	doc   string
	paren bool
	specs []spec
}

type spec struct {
	doc, comment string
	name         string
	goType       string // a const's declared type, if any
	ref          cRef
}

// cRef is what a spec refers to in C.
type cRef struct {
	kind refKind
	name string // the macro, or the struct's tag
}

type refKind int

const (
	refConst     refKind = iota // C.NAME
	refSizeof                   // C.sizeof_struct_NAME
	refOffsetof                 // C.offsetof_struct_NAME: a constant per field
	refStruct                   // C.struct_NAME as a type
	refEnumNames                // C.names_enum_NAME: the names of enum NAME
)

// parseInput reads the input src (named file, for messages).
func parseInput(file string, src []byte) (*input, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	text := func(cg *ast.CommentGroup) string {
		if cg == nil {
			return ""
		}
		return string(src[fset.Position(cg.Pos()).Offset:fset.Position(cg.End()).Offset])
	}
	in := &input{pkg: f.Name.Name}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			return nil, fmt.Errorf("%s: only const, var, type and import \"C\" declarations", fset.Position(d.Pos()))
		}
		switch g.Tok {
		case token.IMPORT:
			if len(g.Specs) != 1 || g.Specs[0].(*ast.ImportSpec).Path.Value != `"C"` || g.Doc == nil {
				return nil, fmt.Errorf("%s: one import, \"C\", after the preamble", fset.Position(g.Pos()))
			}
			in.preamble = g.Doc.Text()
			continue
		case token.CONST, token.VAR, token.TYPE:
		default:
			return nil, fmt.Errorf("%s: only const, var, type and import \"C\" declarations", fset.Position(g.Pos()))
		}
		out := decl{tok: g.Tok, doc: text(g.Doc), paren: g.Lparen.IsValid()}
		for _, s := range g.Specs {
			sp, err := parseSpec(g.Tok, s, text)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", fset.Position(s.Pos()), err)
			}
			out.specs = append(out.specs, sp)
		}
		in.decls = append(in.decls, out)
	}
	if in.preamble == "" {
		return nil, fmt.Errorf("%s: no cgo preamble", file)
	}
	return in, nil
}

func parseSpec(tok token.Token, s ast.Spec, text func(*ast.CommentGroup) string) (spec, error) {
	switch s := s.(type) {
	case *ast.TypeSpec:
		name, ok := cName(s.Type)
		if !ok || !strings.HasPrefix(name, "struct_") || s.Assign.IsValid() || s.TypeParams != nil {
			return spec{}, fmt.Errorf("type %s: not a C struct", s.Name.Name)
		}
		return spec{doc: text(s.Doc), comment: text(s.Comment), name: s.Name.Name,
			ref: cRef{refStruct, strings.TrimPrefix(name, "struct_")}}, nil
	case *ast.ValueSpec:
		if len(s.Names) != 1 || len(s.Values) != 1 {
			return spec{}, fmt.Errorf("one name and one C value a spec")
		}
		name, ok := cName(s.Values[0])
		sp := spec{doc: text(s.Doc), comment: text(s.Comment), name: s.Names[0].Name}
		if names := strings.HasPrefix(name, "names_enum_"); !ok || names != (tok == token.VAR) {
			return spec{}, fmt.Errorf("%s %s: not a C constant (a const) or enum's names (a var)", tok, sp.name)
		}
		if tok == token.VAR {
			if s.Type != nil {
				return spec{}, fmt.Errorf("var %s: an enum's names take no type", sp.name)
			}
			sp.ref = cRef{refEnumNames, strings.TrimPrefix(name, "names_enum_")}
			return sp, nil
		}
		if s.Type != nil {
			id, ok := s.Type.(*ast.Ident)
			if !ok {
				return spec{}, fmt.Errorf("const %s: a type that is not a name", sp.name)
			}
			sp.goType = id.Name
		}
		switch {
		case strings.HasPrefix(name, "sizeof_struct_"):
			sp.ref = cRef{refSizeof, strings.TrimPrefix(name, "sizeof_struct_")}
		case strings.HasPrefix(name, "offsetof_struct_"):
			if sp.goType != "" {
				return spec{}, fmt.Errorf("const %s: offsets take no type", sp.name)
			}
			sp.ref = cRef{refOffsetof, strings.TrimPrefix(name, "offsetof_struct_")}
		default:
			sp.ref = cRef{refConst, name}
		}
		return sp, nil
	}
	return spec{}, fmt.Errorf("unexpected %T", s)
}

// cName returns NAME of an expression C.NAME.
func cName(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	x, ok := sel.X.(*ast.Ident)
	return sel.Sel.Name, ok && x.Name == "C"
}
