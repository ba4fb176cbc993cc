package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// printFlags prints fs's flags as `softnic CMD -h` shows them: a flag and
// the names that are "same as" it on one line (-s, --size), then what it
// does and its default, always, where flag.PrintDefaults leaves out zero
// ones (a default of 0 or "" is a choice a user should see too).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	aliases := map[string][]string{}
	var mains []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if target, ok := strings.CutPrefix(f.Usage, "same as -"); ok && fs.Lookup(target) != nil {
			aliases[target] = append(aliases[target], f.Name)
			return
		}
		mains = append(mains, f)
	})
	sort.Slice(mains, func(i, j int) bool { return mains[i].Name < mains[j].Name })
	for _, f := range mains {
		names := dashed(f.Name)
		for _, a := range aliases[f.Name] {
			names += ", " + dashed(a)
		}
		arg, usage := flag.UnquoteUsage(f)
		if arg != "" {
			names += " " + arg
		}
		fmt.Fprintf(w, "  %s\n    \t%s%s\n", names, strings.ReplaceAll(usage, "\n", "\n    \t"), defaultNote(f, usage))
	}
}

// dashed is a flag's name as the help shows it: -x, --long (either takes
// one dash or two).
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// defaultNote is " (default X)" for a flag whose usage does not say its
// default already.
func defaultNote(f *flag.Flag, usage string) string {
	if strings.Contains(usage, "default") || strings.Contains(usage, "required") {
		return ""
	}
	switch v := f.DefValue; {
	case isBoolFlag(f) && v == "false":
		return " (default off)"
	case v == "" || v == "[]":
		return " (default: none)"
	case isBoolFlag(f):
		return " (default on)"
	default:
		if _, ok := f.Value.(interface{ Get() any }); ok {
			if s, isString := f.Value.(interface{ Get() any }).Get().(string); isString {
				return fmt.Sprintf(" (default %q)", s)
			}
		}
		return " (default " + v + ")"
	}
}

// isBoolFlag reports whether f takes no argument (-v, not -v VALUE).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// runHelp is `softnic help [COMMAND]`: the list of commands, or one
// command's usage and flags on stdout.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || wantsHelp(args[:1]) {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softnic help: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	cmd.run([]string{"-h"}, stdout, stdout)
	return 0
}
