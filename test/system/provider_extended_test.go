package system

import (
	"context"
	"testing"
	"time"
)

// TestProviderExtendedVerbs runs testdata/provider_extended.c through the
// provider, as user nobody: ibv_create_cq_ex's polling and ibv_create_qp_ex's
// ibv_wr_* work requests on an RC QP connected to itself, each opcode, and
// the batches that must post nothing.
func TestProviderExtendedVerbs(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "provider_extended")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 24)
	w.stop(t)
}
