package system

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
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
	prog := buildCProgram(t, ctx, w.bin, "provider_restart")
	p := startCProgram(t, w.command(ctx, w.a, prog))
	p.waitFor(t, "ready")
	require.NoError(t, w.daemons[0].Kill())
	p.resume(t)
	p.waitFor(t, "closed")

	w.daemons[0] = systest.StartDaemon(t, w.bin, w.a, w.runDir)
	p.resume(t)
	p.finish(t, 16)
	w.stop(t)
}
