package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit are set by the Makefile (-ldflags -X main.version=...
// -X main.commit=...). A plain `go build` in a git tree leaves them
// "unknown"; the commit then comes from the build's VCS stamp.
var (
	version = "unknown"
	commit  = "unknown"
)

func init() {
	register("version", "print softnic's version and the git commit it was built from", runVersion)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic version\n\nPrints the version, the git commit (\"-dirty\" if the tree had changes) and the Go toolchain.")
	}
	if pos, status, ok := parseArgs(fs, args, 2); !ok || len(pos) != 0 {
		if ok {
			fs.Usage()
			status = 2
		}
		return status
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintf(stdout, "softnic %s (commit %s, %s)\n", version, buildCommit(commit, info), runtime.Version())
	return 0
}

// buildCommit is the commit the Makefile gave, else the build's
// vcs.revision (with "-dirty" when vcs.modified), else "unknown".
func buildCommit(set string, info *debug.BuildInfo) string {
	if set != "unknown" && set != "" {
		return set
	}
	if info == nil {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
