package system

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// TestProviderRegistersEveryMapping runs testdata/mr_kinds.c through the
// provider, as user nobody: a target program on one daemon registers a
// buffer of each kind of mapping (heap, posix_memalign, anonymous mmap,
// stack, shared and private file mappings, shared anonymous, huge pages)
// while a thread of its own writes elsewhere in the same pages, and a peer
// on the other daemon RDMA WRITEs into it, READs from it and SENDs into
// it; both check every byte, and the thread's writes must all be there.
// The huge-page case needs a free 2 MiB huge page: the test raises
// vm.nr_hugepages by one for it if it can (and puts it back), and reports
// the case as not run, with the reason, when the kernel has none.
func TestProviderRegistersEveryMapping(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "mr_kinds")
	for _, k := range []struct {
		name   string
		checks int
	}{
		{"heap", 12}, {"memalign", 11}, {"mmap", 11}, {"stack", 10}, {"shared-file", 14}, {"private-file", 13},
		{"shared-anon", 11}, {"hugetlb", 11},
	} {
		t.Run(k.name, func(t *testing.T) {
			if k.name == "hugetlb" {
				if why := freeHugePage(t); why != "" {
					t.Skip("not run: " + why)
				}
			}
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			target := startCProgram(t, w.command(ctx, w.a, prog, "target", k.name, "1"))
			tinfo := target.waitForPrefix(t, "info ")
			peer := startCProgram(t, w.command(ctx, w.b, prog, "peer", "1"))
			pinfo := peer.waitForPrefix(t, "info ")
			target.tell(t, pinfo)
			target.waitFor(t, "connected")
			peer.tell(t, tinfo)
			peer.finish(t, 6)
			target.waitFor(t, "checked")
			target.resume(t)
			target.finish(t, k.checks)
		})
	}
	w.stop(t)
}

// TestProviderReadOnlyMapping runs testdata/mr_readonly.c through the
// provider, as user nobody: registering a read-only mapping (anonymous
// after mprotect, a read-only file mapped shared and private) with a write
// right fails with EFAULT, as the kernel's ibv_reg_mr does; with
// REMOTE_READ only it works, and RDMA READs from it and WRITEs out of it
// move its bytes.
func TestProviderReadOnlyMapping(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "mr_readonly")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 25)
	w.stop(t)
}

// freeHugePage makes sure the kernel has a free 2 MiB huge page: if none
// is free it raises vm.nr_hugepages by one, and puts the old value back
// when the test ends. It returns "" or why no huge page can be had.
func freeHugePage(t *testing.T) string {
	info := func() (size, free int, err error) {
		b, err := os.ReadFile("/proc/meminfo")
		if err != nil {
			return 0, 0, err
		}
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			f := strings.Fields(s.Text())
			if len(f) >= 2 && f[0] == "Hugepagesize:" {
				size, _ = strconv.Atoi(f[1])
			} else if len(f) >= 2 && f[0] == "HugePages_Free:" {
				free, _ = strconv.Atoi(f[1])
			}
		}
		return size, free, nil
	}
	size, free, err := info()
	switch {
	case err != nil:
		return err.Error()
	case size != 2048:
		return fmt.Sprintf("the kernel's huge pages are %d kB, not 2048", size)
	case free > 0:
		return ""
	}
	const knob = "/proc/sys/vm/nr_hugepages"
	old, err := os.ReadFile(knob)
	if err != nil {
		return err.Error()
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(old)))
	if err != nil {
		return fmt.Sprintf("%s: %q", knob, old)
	}
	if err := os.WriteFile(knob, []byte(strconv.Itoa(n+1)), 0o644); err != nil {
		return fmt.Sprintf("no free huge page, and raising %s failed: %v", knob, err)
	}
	t.Cleanup(func() { require.NoError(t, os.WriteFile(knob, old, 0o644)) })
	if _, free, err = info(); err != nil || free == 0 {
		return fmt.Sprintf("no free huge page even with %s at %d", knob, n+1)
	}
	return ""
}

// TestProviderMemoryWindows runs testdata/mw.c through the provider, as
// user nobody: the device's window caps, ibv_alloc_mw (type 3 EINVAL), a
// type 2 window bound by IBV_WR_BIND_MW, written through, its region's
// dereg refused (EBUSY), invalidated by IBV_WR_LOCAL_INV and then
// refused; a type 1 window bound by ibv_bind_mw (mw->rkey incremented),
// written through, deallocated while bound and then refused.
func TestProviderMemoryWindows(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "mw")
	startCProgram(t, w.command(ctx, w.a, prog)).finish(t, 22)
	w.stop(t)
}
