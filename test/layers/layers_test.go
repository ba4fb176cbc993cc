// Package layers checks the module's import graph against its layers:
// from the leaves up through the transport, RoCE, the verbs API, rdma_cm,
// the daemon and the tools to the binary, a package imports only its own
// layer and those below (docs/ARCHITECTURE.md).
package layers

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/softnic/softnic/"

// layers ranks the module's packages by path prefix, the longest first
// found; a package imports only ranks at or below its own.
var layers = []struct {
	prefix string
	rank   int
}{
	{"bpf", 0}, {"xdp", 0}, {"counters", 0}, {"internal/", 0},
	{"ibtransport", 1}, {"ibtransport/header", 1}, {"ibtransport/ibv", 1},
	{"ibtransport/", 2}, {"hostif", 2}, {"internal/procmem", 2},
	{"roce", 3},
	{"verbs", 4},
	{"rdmacm", 5},
	{"daemon", 6},
	{"tools/", 7},
	{"cmd/", 8}, {"bench/", 8}, {"test/", 8},
}

// upward are the imports against the layers that remain, each a package
// and what it imports from above: the daemon backend inside verbs and
// rdmacm. One not in the graph any more fails the test too, so that the
// list only shrinks.
var upward = map[string]bool{
	"verbs -> daemon/client":  true,
	"rdmacm -> daemon/client": true,
}

func rank(t *testing.T, pkg string) int {
	best, r := -1, -1
	for _, l := range layers {
		if (pkg == strings.TrimSuffix(l.prefix, "/") || strings.HasPrefix(pkg, l.prefix)) && len(l.prefix) > best {
			best, r = len(l.prefix), l.rank
		}
	}
	require.GreaterOrEqual(t, r, 0, "package %s is in no layer (add it to layers)", pkg)
	return r
}

func TestImportsFollowTheLayers(t *testing.T) {
	gocmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	// The packages' own imports; tests may reach higher (roce's use verbs).
	out, err := exec.Command(gocmd, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		module+"...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	seen := map[string]bool{}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if rank(t, imp) <= rank(t, pkg) {
				continue
			}
			edge := pkg + " -> " + imp
			if upward[edge] {
				seen[edge] = true
				continue
			}
			bad = append(bad, edge)
		}
	}
	sort.Strings(bad)
	require.Empty(t, bad, "imports from a lower layer to a higher one")
	for edge := range upward {
		require.True(t, seen[edge], "%s is gone: take it off the list of upward imports", edge)
	}
}
