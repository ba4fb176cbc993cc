package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// tools is what one test binary builds once: softnic, its provider and a
// copy of the test binary, in one root-owned directory every user may
// enter (softnic exec finds the provider beside the binary).
var tools struct {
	mu       sync.Mutex
	dir      string
	softnic  string
	provider bool
	testBin  string
}

// Main runs the package's tests and removes the built tools, then exits
// with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	tools.mu.Lock()
	if tools.dir != "" {
		os.RemoveAll(tools.dir)
	}
	tools.mu.Unlock()
	os.Exit(code)
}

// toolsDir returns the tools' directory, made on first use; tools.mu is held.
func toolsDir() (string, error) {
	if tools.dir != "" {
		return tools.dir, nil
	}
	dir, err := os.MkdirTemp("", "softnic-systest-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	tools.dir = dir
	return dir, nil
}

// Softnic returns the softnic binary, built on first use without cgo, as
// make build and a release build it (softnic daemon refuses to start as a
// cgo binary), where every user may run it.
func Softnic(t testing.TB) string {
	t.Helper()
	tools.mu.Lock()
	defer tools.mu.Unlock()
	if tools.softnic != "" {
		return tools.softnic
	}
	dir, err := toolsDir()
	if err != nil {
		t.Fatalf("tools directory: %v", err)
	}
	bin := filepath.Join(dir, "softnic")
	if err := build(bin, "0"); err != nil {
		t.Fatal(err)
	}
	tools.softnic = bin
	return bin
}

// SoftnicCgo builds softnic with CGO_ENABLED=cgo into dir and returns it.
func SoftnicCgo(t testing.TB, dir, cgo string) string {
	t.Helper()
	bin := filepath.Join(dir, "softnic")
	if err := build(bin, cgo); err != nil {
		t.Fatal(err)
	}
	return bin
}

func build(bin, cgo string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin,
		"github.com/softnic/softnic/cmd/softnic")
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build softnic (CGO_ENABLED=%s): %v: %s", cgo, err, out)
	}
	return nil
}

// SoftnicWithProvider returns Softnic's binary with the C provider and
// softnic's librdmacm built beside it (make -C provider), as make build
// puts them.
func SoftnicWithProvider(t testing.TB) string {
	t.Helper()
	bin := Softnic(t)
	tools.mu.Lock()
	defer tools.mu.Unlock()
	if tools.provider {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "make", "-s", "-C", filepath.Join(Root(t), "provider"), "O="+tools.dir).CombinedOutput()
	if err != nil {
		t.Fatalf("make provider: %v: %s", err, out)
	}
	tools.provider = true
	return bin
}

// ToolsDir returns the directory of the built tools (root-owned, mode
// 0755, removed by Main), where a package may build programs of its own
// once for all its tests.
func ToolsDir(t testing.TB) string {
	t.Helper()
	tools.mu.Lock()
	defer tools.mu.Unlock()
	dir, err := toolsDir()
	if err != nil {
		t.Fatalf("tools directory: %v", err)
	}
	return dir
}

// TestBinary returns a copy of the running test binary where every user
// may run it, for tests whose unprivileged programs it plays.
func TestBinary(t testing.TB) string {
	t.Helper()
	tools.mu.Lock()
	defer tools.mu.Unlock()
	if tools.testBin != "" {
		return tools.testBin
	}
	dir, err := toolsDir()
	if err != nil {
		t.Fatalf("tools directory: %v", err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	tools.testBin = bin
	return bin
}

// Root returns the module's root directory (where go.mod is), found from
// the test's working directory, its package's.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}
