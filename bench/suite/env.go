package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// runEnv describes where and on what the figures were measured.
type runEnv struct {
	kernel, commit     string
	cpus               int
	loadStart, loadEnd string
}

func collectEnv() runEnv {
	e := runEnv{cpus: runtime.NumCPU(), loadStart: loadAverage()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.kernel = unix.ByteSliceToString(u.Release[:])
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		e.commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			e.commit += " + uncommitted changes"
		}
	}
	return e
}

func (e runEnv) summary() string {
	return fmt.Sprintf("%d CPUs, Linux %s, %s, commit %s, load average %s", e.cpus, e.kernel, runtime.Version(), e.commit, e.loadStart)
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func goVersion() string { return runtime.Version() }
