package system

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestProviderFuzz builds the C provider's libFuzzer harness (provider/
// fuzz.c: control replies with their descriptors, create_qp's ring
// layout, completion entries) and librdmacm's (fuzz_rdmacm.c: the
// daemon's event records, rdma_getaddrinfo's addresses) with clang's
// address and undefined-behaviour sanitizers, and runs them on generated
// inputs: they abort on a crash, a descriptor leak, an entry outside its
// ring or an event that points outside itself or at the wrong ID.
func TestProviderFuzz(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install clang make libibverbs-dev librdmacm-dev", "clang", "make")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, "make", "-s", "-C", filepath.Join(systest.Root(t), "provider"), "O="+dir, "fuzz").CombinedOutput()
	require.NoError(t, err, "make fuzz: %s", out)
	runs := "300000"
	if testing.Short() {
		runs = "20000"
	}
	for _, harness := range []string{"fuzz-provider", "fuzz-rdmacm"} {
		fuzz := exec.CommandContext(ctx, filepath.Join(dir, harness), "-runs="+runs, "-seed=1", "-artifact_prefix="+dir+"/")
		out, err = fuzz.CombinedOutput()
		require.NoError(t, err, "%s failed:\n%s", harness, out)
	}
}
