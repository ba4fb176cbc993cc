package system

import (
	"context"
	"testing"
	"time"
)

// TestImportThroughProvider runs testdata/import_objects.c through the
// provider as user nobody: ibv_import_device of a duplicate of a
// context's cmd_fd, its PD, region and device memory imported, the
// original context closed first and the imported objects still used (a
// QP on them RDMA WRITEs from the region into the device memory and into
// the region), unimport and destroy through the import; and the
// descriptors it refuses: a pipe, -1, an open of /dev/null that is no
// context, and the parent's cmd_fd in a forked child.
func TestImportThroughProvider(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "import_objects")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 26)
	w.stop(t)
}
