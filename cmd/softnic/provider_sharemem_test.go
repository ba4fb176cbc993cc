package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProviderSharesRegisteredPages runs testdata/provider_sharemem.c
// through the provider, as user nobody: a region of whole pages of private
// memory becomes memory the daemon maps (so its engine copies payloads
// without process_vm calls) while the program's bytes and pointers stay as
// they were; the daemon unmaps it at deregistration. With
// SOFTNIC_SHARE_MR=0 nothing is shared, and the same transfers work
// through process_vm.
func TestProviderSharesRegisteredPages(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "provider_sharemem")
	daemonPid := w.daemons[0].Process.Pid
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			cmd := w.command(ctx, w.a, prog)
			want := 0
			if off {
				cmd.Args = append(cmd.Args, "off")
				cmd.Env = append(os.Environ(), "SOFTNIC_SHARE_MR=0")
			} else {
				want = 1
			}
			p := startCProgram(t, cmd)
			p.waitFor(t, "registered")
			assert.Equal(t, want, sharedMappings(t, daemonPid), "the daemon's mappings of the program's memory")
			p.resume(t)
			p.waitFor(t, "deregistered")
			assert.Zero(t, sharedMappings(t, daemonPid), "mappings left after ibv_dereg_mr")
			p.resume(t)
			p.finish(t, 18)
		})
	}
	w.stop(t)
}

// sharedMappings counts the daemon's mappings of memfds the provider made.
func sharedMappings(t *testing.T, pid int) int {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	return strings.Count(string(maps), "memfd:softnic-mr")
}
