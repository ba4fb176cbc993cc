// Command softnic is a software RoCEv2 adapter and the tools that go with
// it. Run `softnic help` for the list of subcommands.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. run returns the process exit status.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is filled by the init functions of the subcommand files.
var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: softnic COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "this list, or with a command its usage and flags (softnic help perf)")
	fmt.Fprintln(w, "\nRun 'softnic COMMAND -h' or 'softnic help COMMAND' for a command's flags and their defaults.")
	fmt.Fprintln(w, "Commands that move traffic (daemon, perf, pingpong, rping) take --pcap FILE to capture it.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stderr)
		return 2
	case args[0] == "help":
		return runHelp(args[1:], stdout, stderr)
	case args[0] == "-h" || args[0] == "--help":
		usage(stdout)
		return 0
	case args[0] == viewChildCommand: // softnic exec's child (execview.go)
		return runViewChild(args[1:], stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softnic: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if helpWanted(args[0], args[1:]) {
		// The usage that was asked for goes to stdout (softnic perf -h |
		// less), as softnic help's does; a mistake's stays on stderr.
		return cmd.run(args[1:], stdout, stdout)
	}
	return cmd.run(args[1:], stdout, stderr)
}

// helpWanted reports whether command name's args ask for its usage. exec's
// own flags end at the program, whose -h is the program's.
func helpWanted(name string, args []string) bool {
	if name == "exec" {
		end := 0
		for end < len(args) && strings.HasPrefix(args[end], "-") && args[end] != "--" {
			end++
		}
		args = args[:end]
	}
	return wantsHelp(args)
}
