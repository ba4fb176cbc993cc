// Package layers checks the module's import graph against its layers:
// from the leaves up through the IB vocabulary, the transport engine,
// RoCE, the verbs API, rdma_cm, the daemon and the tools to the binary, a
// package imports only its own layer and those below
// (docs/ARCHITECTURE.md).
package layers

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/softnic/softnic/"

// layers ranks the module's packages by path prefix, the longest that
// matches (a prefix ending in a slash matches the packages under it, any
// other the package and those under it); a package imports only ranks at
// or below its own. The IB vocabulary (header, ibv) lies under the
// transport engine, and so do the packages that need only it: the
// management datagrams and the IB CM, the host interface and a session
// at its level (daemon/client/session), the daemon's metrics, procmem.
// The daemon's client (daemon/client), the verbs and rdma_cm backend
// built on that session, sits with the daemon.
var layers = []struct {
	prefix string
	rank   int
}{
	{"bpf", 0}, {"xdp", 0}, {"counters", 0}, {"internal/", 0},
	{"ibtransport/header", 1}, {"ibtransport/ibv", 1},
	{"ibtransport/", 2}, {"hostif", 2}, {"daemon/client/session", 2}, {"internal/procmem", 2},
	{"daemon/metrics", 2},
	{"ibtransport", 3},
	{"roce", 4},
	{"verbs", 5},
	{"rdmacm", 6},
	{"daemon", 7},
	{"tools/", 8},
	{"cmd/", 9}, {"bench/", 9}, {"test/", 9}, {"internal/systest", 9},
}

func rank(t *testing.T, pkg string) int {
	best, r := -1, -1
	for _, l := range layers {
		under := l.prefix
		if !strings.HasSuffix(under, "/") {
			under += "/"
		}
		if (pkg == l.prefix || strings.HasPrefix(pkg, under)) && len(l.prefix) > best {
			best, r = len(l.prefix), l.rank
		}
	}
	require.GreaterOrEqual(t, r, 0, "package %s is in no layer (add it to layers)", pkg)
	return r
}

// upward returns the imports against the layers in lines, each a package
// and its imports as `go list` prints them.
func upward(t *testing.T, lines []string) []string {
	var bad []string
	for _, line := range lines {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if rank(t, imp) > rank(t, pkg) {
				bad = append(bad, pkg+" -> "+imp)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func TestImportsFollowTheLayers(t *testing.T) {
	gocmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	// The packages' own imports; tests may reach higher (roce's use verbs).
	out, err := exec.Command(gocmd, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		module+"...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Empty(t, upward(t, lines), "imports from a lower layer to a higher one")
}

// The packages that need only the IB vocabulary may not import the
// engine, the vocabulary imports nothing above it, and the API packages
// do not import the daemon's client, their backend.
func TestTheEngineIsAboveItsVocabulary(t *testing.T) {
	var lines []string
	for _, pkg := range []string{"hostif", "ibtransport/mad", "ibtransport/cm", "daemon/client/session", "daemon/metrics",
		"internal/procmem", "ibtransport/ibv"} {
		lines = append(lines, module+pkg+" "+module+"ibtransport "+module+"ibtransport/header")
	}
	lines = append(lines, module+"ibtransport/header "+module+"ibtransport/ibv",
		module+"ibtransport/ibv "+module+"ibtransport/header "+module+"counters",
		module+"ibtransport "+module+"ibtransport/ibv "+module+"ibtransport/header",
		module+"verbs "+module+"daemon/client "+module+"ibtransport",
		module+"rdmacm "+module+"daemon/client "+module+"verbs")
	assert.Equal(t, []string{
		"daemon/client/session -> ibtransport", "daemon/metrics -> ibtransport", "hostif -> ibtransport",
		"ibtransport/cm -> ibtransport", "ibtransport/ibv -> ibtransport", "ibtransport/mad -> ibtransport",
		"internal/procmem -> ibtransport", "rdmacm -> daemon/client", "verbs -> daemon/client",
	}, upward(t, lines))
}
