package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProviderSurvivesDaemonRestart runs a C program (testdata/
// provider_restart.c) through the provider, as user nobody, that holds
// objects of every kind while its daemon is killed with SIGKILL (so the
// daemon leaves its tree and device file behind). The program's calls must
// then fail cleanly and its teardown succeed; a new daemon must start over
// the old one's leftovers, and the same program open the device again from
// a fresh device list.
func TestProviderSurvivesDaemonRestart(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := filepath.Join(filepath.Dir(w.bin), "provider_restart")
	out, err := exec.CommandContext(ctx, "cc", "-O1", "-Wall", "-Werror", "-o", prog,
		filepath.Join("testdata", "provider_restart.c"), "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc: %s", out)

	cmd := w.command(ctx, w.a, prog)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	var said strings.Builder
	waitFor := func(want string) {
		t.Helper()
		for lines.Scan() {
			said.WriteString(lines.Text() + "\n")
			if lines.Text() == want {
				return
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the program ended before %q:\n%s", want, said.String())
	}

	waitFor("ready")
	daemon := w.daemons[0]
	require.NoError(t, daemon.Process.Kill())
	daemon.Wait()
	_, err = io.WriteString(stdin, "go\n")
	require.NoError(t, err)
	waitFor("closed")

	w.daemons[0], _ = startDaemon(t, w.bin, w.a, w.runDir)
	_, err = io.WriteString(stdin, "go\n")
	require.NoError(t, err)
	for lines.Scan() {
		said.WriteString(lines.Text() + "\n")
	}
	err = cmd.Wait()
	t.Logf("the program said:\n%s", said.String())
	assert.NoError(t, err, "checks failed (the exit status counts them)")
	assert.NotContains(t, said.String(), "FAIL")
	assert.Equal(t, 15, strings.Count(said.String(), "ok  "), "every check ran")
	w.stop(t)
}
