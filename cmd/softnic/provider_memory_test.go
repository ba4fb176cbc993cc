package main

import (
	"context"
	"testing"
	"time"
)

// TestProviderDeregAfterUnmap runs testdata/mr_remap.c through the
// provider, as user nobody: a program that unmaps (munmap, free, mremap)
// a registered buffer before ibv_dereg_mr, as UCX's ucx_info does, or maps
// the range again with new data (anonymous, a shared file, half of it),
// must see ibv_dereg_mr return, its new data intact byte for byte and a
// file's mapping still the file's; its session must go on registering and
// moving data. The provider touches no memory of the program's in
// ibv_dereg_mr.
func TestProviderDeregAfterUnmap(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "mr_remap")
	for _, c := range []struct {
		name   string
		checks int
	}{
		{"munmap", 8}, {"free", 8}, {"mremap", 11}, {"remap-anon", 11}, {"remap-file", 14}, {"remap-part", 11},
	} {
		t.Run(c.name, func(t *testing.T) {
			startCProgram(t, w.command(ctx, w.a, prog, c.name)).finish(t, c.checks)
		})
	}
	w.stop(t)
}
