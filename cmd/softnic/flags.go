package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// flagSet registers each option under its short and its long perftest
// name, so both "-s 4096" and "--size=4096" work.
type flagSet struct{ *flag.FlagSet }

func (f flagSet) intVar(p *int, short, long string, v int, usage string) {
	f.IntVar(p, short, v, usage)
	f.IntVar(p, long, v, "same as -"+short)
}

func (f flagSet) uint64Var(p *uint64, short, long string, v uint64, usage string) {
	f.Uint64Var(p, short, v, usage)
	f.Uint64Var(p, long, v, "same as -"+short)
}

func (f flagSet) stringVar(p *string, short, long string, v string, usage string) {
	f.StringVar(p, short, v, usage)
	f.StringVar(p, long, v, "same as -"+short)
}

func (f flagSet) boolVar(p *bool, short, long string, usage string) {
	f.BoolVar(p, short, false, usage)
	f.BoolVar(p, long, false, "same as -"+short)
}

// sizeFlag is perftest's -s: a number (strtol base 0) with an optional K
// or M suffix, between 1 and UINT_MAX/2.
type sizeFlag uint64

func (s *sizeFlag) String() string { return strconv.FormatUint(uint64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	factor := uint64(1)
	switch {
	case strings.HasSuffix(v, "K"):
		v, factor = strings.TrimSuffix(v, "K"), 1024
	case strings.HasSuffix(v, "M"):
		v, factor = strings.TrimSuffix(v, "M"), 1024*1024
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return err
	}
	if n < 1 || n > math.MaxUint32/2/factor {
		return fmt.Errorf("message size should be between 1 and %d", uint64(math.MaxUint32/2))
	}
	*s = sizeFlag(n * factor)
	return nil
}

// parseInterleaved parses flags given before and after the positional
// host, as getopt does for the C tools.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseArgs parses args with fs, flags and positional arguments mixed.
// ok is false when the command must end at once, with status: 0 after -h,
// badUsage after a flag error (the flag package has printed it).
func parseArgs(fs *flag.FlagSet, args []string, badUsage int) (pos []string, status int, ok bool) {
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0, false
	}
	if err != nil {
		return nil, badUsage, false
	}
	return pos, 0, true
}

// helpStatus is the exit status after fs.Parse failed with err: 0 when
// it was -h or --help (the usage is what was asked for), else badUsage.
func helpStatus(err error, badUsage int) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return badUsage
}

// wantsHelp reports whether args ask for the usage (-h, --help) before a
// "--": for the commands that parse their own way (rping's getopt, help).
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// failer returns a function that prints "softnic CMD: message" to stderr
// and returns exit status 1.
func failer(stderr io.Writer, cmd string) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "softnic "+cmd+": "+format+"\n", a...)
		return 1
	}
}
