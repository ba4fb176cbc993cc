package isolation

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mapping is a line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	name       string
}

func readMaps(t *testing.T, pid int) []mapping {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	var maps []mapping
	line := regexp.MustCompile(`^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$`)
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		m := line.FindStringSubmatch(l)
		require.NotNil(t, m, "maps line %q", l)
		start, _ := strconv.ParseUint(m[1], 16, 64)
		end, _ := strconv.ParseUint(m[2], 16, 64)
		maps = append(maps, mapping{start, end, m[3]})
	}
	return maps
}

// probes returns pages the helper maps and the child does not (up to 16
// of each helper mapping, spread over it), and as many pages that neither
// maps, near the helper's mappings, where an attacker looking for them
// would probe.
func probes(t *testing.T, helper, child int) (mapped, unmapped []uint64) {
	hm, cm := readMaps(t, helper), readMaps(t, child)
	in := func(maps []mapping, a uint64) bool {
		for _, m := range maps {
			if m.start <= a && a < m.end {
				return true
			}
		}
		return false
	}
	const top = 1 << 47 // the end of x86-64 user space with 4-level page tables
	for _, m := range hm {
		if m.name == "[vsyscall]" {
			continue
		}
		pages := (m.end - m.start) / page
		step := max(pages/16, 1)
		for i := uint64(0); i < pages && i < 16*step; i += step {
			if a := m.start + i*page; !in(cm, a) {
				mapped = append(mapped, a)
			}
		}
		for k := uint64(0); k < 8; k++ {
			for _, a := range []uint64{m.end + k*page, m.start - (k+1)*page} {
				if a >= 1<<16 && a < top-page && !in(hm, a) && !in(cm, a) {
					unmapped = append(unmapped, a)
				}
			}
		}
	}
	sort.Slice(unmapped, func(i, j int) bool { return unmapped[i] < unmapped[j] })
	unmapped = compactSorted(unmapped)
	require.GreaterOrEqual(t, len(mapped), 50, "too few pages to probe in the helper's maps: %v", hm)
	require.GreaterOrEqual(t, len(unmapped), 50, "too few unmapped pages near the helper's: %v", hm)
	return mapped, unmapped
}

func compactSorted(s []uint64) []uint64 {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
