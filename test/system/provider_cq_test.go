package system

import (
	"context"
	"testing"
	"time"
)

// TestProviderCQ runs testdata/provider_cq.c through the provider, as
// user nobody: completion timestamps against ibv_query_rt_values_ex's
// clock, ibv_create_cq_ex's errnos, and ibv_resize_cq keeping the
// completions a CQ holds and its arm.
func TestProviderCQ(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "provider_cq")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 20)
	w.stop(t)
}
