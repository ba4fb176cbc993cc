// Command layoutgen writes package hostif's layouts from provider/hostif.h
// (go generate ./hostif, make generate):
//
//	layoutgen -I ../provider -o ztypes_hostif.go types_hostif.go
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/softnic/softnic/hostif/internal/layoutgen"
)

type includes []string

func (i *includes) String() string     { return fmt.Sprint(*i) }
func (i *includes) Set(s string) error { *i = append(*i, "-I", s); return nil }

func main() {
	var cflags includes
	flag.Var(&cflags, "I", "a directory of the input's C headers (repeatable)")
	out := flag.String("o", "", "the Go file to write (default: standard output)")
	cc := flag.String("cc", "cc", "the C compiler")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: layoutgen [-I dir]... [-o file] [-cc cc] input.go")
		os.Exit(2)
	}
	src, err := layoutgen.Generate(flag.Arg(0), *cc, cflags)
	if err == nil && *out != "" {
		err = os.WriteFile(*out, src, 0o644)
	} else if err == nil {
		_, err = os.Stdout.Write(src)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "layoutgen:", err)
		os.Exit(1)
	}
}
