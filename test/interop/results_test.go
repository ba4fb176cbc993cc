package interop

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Result lines. perftest in the TCG guest sometimes fails to calibrate its
// clock; with -F it then reports inf or nan, which travel in the report
// exchange.
var (
	numRE  = `(?:[0-9.]+|-?inf|-?nan)`
	bwRE   = regexp.MustCompile(`(?m)^ \d+\s+\d+\s+` + numRE + `\s+` + numRE + `\s+` + numRE + `\s*$`)
	latRE  = regexp.MustCompile(`(?m)^ \d+\s+\d+(\s+` + numRE + `){7}\s*$`)
	latDur = regexp.MustCompile(`(?m)^ \d+ +[1-9]\d* +[0-9.]+ +[0-9.]+\s*$`)
	ppRE   = regexp.MustCompile(`(?m)^(\d+) bytes in [0-9.]+ seconds = ([0-9.]+) Mbit/sec$`)
)

// resultRE is the result line of the run.
func (r interopRun) resultRE() *regexp.Regexp {
	switch {
	case r.softnic[0] == "pingpong", r.softnic[0] == "exec" && strings.HasSuffix(r.softnic[1], "_pingpong"):
		return ppRE
	case strings.HasSuffix(r.softnic[1], "_bw"):
		return bwRE
	case slices.Contains(r.softnic, "-D"):
		return latDur
	}
	return latRE
}

func resultOf(results []interopResult, name string) string {
	for _, r := range results {
		if r.name == name {
			return r.out
		}
	}
	return ""
}

// checkSections checks that the guest ran every run and reached the end of
// its script.
func checkSections(t *testing.T, guestOut map[string]string, toServer, toClient []interopRun) {
	t.Helper()
	assert.Len(t, guestOut, len(toServer)+len(toClient)+1, "guest output sections")
}

// checkSameReport checks the runs named name whose server prints the
// client's figures, which travel in the report exchange: each softnic side
// that printed anything must print the line the real tool printed in the
// opposite role.
func checkSameReport(t *testing.T, results []interopResult, guestOut map[string]string, name string) {
	t.Helper()
	for _, pair := range [][2]string{{name + " server", name + " client"}, {name + " client", name + " server"}} {
		if resultOf(results, pair[0]) == "" {
			continue // run one way only
		}
		mine := bwRE.FindString(resultOf(results, pair[0]))
		// The guest ran the opposite role.
		theirs := bwRE.FindString(guestOut[pair[1]])
		if assert.NotEmptyf(t, mine, "softnic %s printed no result line", pair[0]) {
			assert.Equalf(t, theirs, mine, "softnic %s, the real tool as %s", pair[0], pair[1])
		}
	}
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

var counterLine = regexp.MustCompile(`(?m)^  (\S+) +(\d+)$`)

// softnicCounters parses softnic perf --softnic-stats output.
func softnicCounters(out string) map[string]int {
	i := strings.Index(out, " softnic engine counters:")
	if i < 0 {
		return nil
	}
	return counterValues(counterLine, out[i:])
}

var rxeCounterLine = regexp.MustCompile(`(?m)^([a-z_]+):(\d+)$`)

// rxeCounterValues parses the rxeCounters lines of a guest section.
func rxeCounterValues(out string) map[string]int {
	return counterValues(rxeCounterLine, out)
}

// counterValues maps the name re's first group matches to the number in
// its second.
func counterValues(re *regexp.Regexp, out string) map[string]int {
	m := map[string]int{}
	for _, l := range re.FindAllStringSubmatch(out, -1) {
		m[l[1]], _ = strconv.Atoi(l[2])
	}
	return m
}
