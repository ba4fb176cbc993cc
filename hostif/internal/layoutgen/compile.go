package layoutgen

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cLayout is what the C compiler made of an input's references: the
// constants' values, the structs and the enums' enumerators by tag.
type cLayout struct {
	consts  map[cRef]int64
	structs map[string]*dwarf.StructType
	enums   map[string][]*dwarf.EnumValue
}

// compile has the C compiler lay out what in refers to, as cgo -godefs
// does: it compiles the preamble with a variable of each struct and enum
// and an enum of each constant, with debugging information, and reads the
// DWARF of the object.
func compile(in *input, cc string, cflags []string) (*cLayout, error) {
	var prog strings.Builder
	prog.WriteString(in.preamble)
	var consts []cRef
	structs, enums := map[string]bool{}, map[string]bool{}
	for _, d := range in.decls {
		for _, s := range d.specs {
			switch s.ref.kind {
			case refConst, refSizeof:
				consts = append(consts, s.ref)
			case refEnumNames:
				enums[s.ref.name] = true
			default:
				structs[s.ref.name] = true
			}
		}
	}
	if len(consts) > 0 {
		prog.WriteString("\nenum layoutgen_consts {\n")
		for i, c := range consts {
			expr := "(" + c.name + ")"
			if c.kind == refSizeof {
				expr = "sizeof(struct " + c.name + ")"
			}
			fmt.Fprintf(&prog, "\tlayoutgen_k%d = %s,\n", i, expr)
		}
		prog.WriteString("};\nenum layoutgen_consts layoutgen_k;\n")
	}
	for tag := range structs {
		fmt.Fprintf(&prog, "struct %s layoutgen_s_%s;\n", tag, tag)
	}
	for tag := range enums {
		fmt.Fprintf(&prog, "enum %s layoutgen_e_%s;\n", tag, tag)
	}
	dir, err := os.MkdirTemp("", "layoutgen")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src, obj := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout.o")
	if err := os.WriteFile(src, []byte(prog.String()), 0o644); err != nil {
		return nil, err
	}
	args := append(append([]string{}, cflags...), "-g", "-O0", "-c", "-o", obj, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", cc, err, out)
	}
	return readLayout(obj, consts)
}

// readLayout reads the object's variables layoutgen_k (the enum of
// consts), layoutgen_s_TAG and layoutgen_e_TAG.
func readLayout(obj string, consts []cRef) (*cLayout, error) {
	f, err := elf.Open(obj)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return nil, err
	}
	l := &cLayout{consts: map[cRef]int64{}, structs: map[string]*dwarf.StructType{},
		enums: map[string][]*dwarf.EnumValue{}}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagVariable {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		off, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
		if !ok || !strings.HasPrefix(name, "layoutgen_") {
			continue
		}
		t, err := d.Type(off)
		if err != nil {
			return nil, err
		}
		switch t := t.(type) {
		case *dwarf.EnumType:
			if tag, ok := strings.CutPrefix(name, "layoutgen_e_"); ok {
				l.enums[tag] = t.Val
				continue
			}
			for _, v := range t.Val {
				var i int
				if _, err := fmt.Sscanf(v.Name, "layoutgen_k%d", &i); err == nil && i < len(consts) {
					l.consts[consts[i]] = v.Val
				}
			}
		case *dwarf.StructType:
			l.structs[strings.TrimPrefix(name, "layoutgen_s_")] = t
		}
	}
	for _, c := range consts {
		if _, ok := l.consts[c]; !ok {
			return nil, fmt.Errorf("no value for C.%s in the object's DWARF", c.name)
		}
	}
	return l, nil
}
