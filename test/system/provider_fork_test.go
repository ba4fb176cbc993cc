package system

import (
	"context"
	"testing"
	"time"
)

// TestForkedChildrenShareTheContext runs testdata/fork_child.c through
// the provider as user nobody: four forked children and their parent make
// and destroy PDs, device memory and CQs at once on the parent's context,
// each command answered to its own process; a child's ibv_reg_mr is
// EACCES; the parent's session goes on after they exit.
func TestForkedChildrenShareTheContext(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "fork_child")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 6)
	w.stop(t)
}
