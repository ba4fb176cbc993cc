package middleware

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// suiteSkip is a reason for which TestRdmaCoreSuite lets tests of
// rdma-core's suite skip: of the tests whose dotted names match tests.
type suiteSkip struct {
	class   string
	tests   *regexp.Regexp
	reasons *regexp.Regexp
}

var anyTest = regexp.MustCompile(``)

// suiteSkips are the skips TestRdmaCoreSuite lets by, by class.
var suiteSkips = []suiteSkip{
	{"another vendor's device", anyTest, regexp.MustCompile(`^(Can not run the test over non (MLX5|EFA) device|` +
		`Could not open mlx5 context .*|` +
		// mlx5dv_ts_to_ns, which only an mlx5 device answers.
		`Converting timestamp to nanoseconds is not supported)$`)},
	{"this machine", anyTest, regexp.MustCompile(`^(Allocating dmabuf is not supported by .*|There are no huge pages of size .* allocated|` +
		`cuda-python .* must be installed to run CUDA tests|PCI device must be passed by the user)$`)},
	// What softnic does not offer yet (issue #35): each goes when its
	// feature lands, so that its tests must pass from then on.
}

// suiteFailsYet are the suite's tests softnic fails yet, and why: each
// must fail until it is fixed, then go from the list.
var suiteFailsYet = map[string]string{}

// suiteOutcome is how one test of the suite ended: "ok", "skipped", "ERROR",
// "FAIL", "expected failure" or "unexpected success", and a skip's reason.
type suiteOutcome struct {
	name, result, reason string
}

var (
	suiteStart  = regexp.MustCompile(`^test\w* \(([\w.]+)\)`)
	suiteResult = regexp.MustCompile(`(?:^| \.\.\. )(ok|skipped '(.*)'|ERROR|FAIL|expected failure|unexpected success)$`)
)

// parseSuite reads run_tests.py -v's output: each test's line (its name,
// then, with a docstring, its first line on the next), then " ... " and
// its result, which a test's own print may push to a line of its own.
func parseSuite(out string) []suiteOutcome {
	var res []suiteOutcome
	name := ""
	for _, l := range strings.Split(out, "\n") {
		if m := suiteStart.FindStringSubmatch(l); m != nil {
			name = m[1]
		}
		if name == "" {
			continue
		}
		if m := suiteResult.FindStringSubmatch(l); m != nil {
			r := m[1]
			if strings.HasPrefix(r, "skipped") {
				r = "skipped"
			}
			res = append(res, suiteOutcome{name: name, result: r, reason: m[2]})
			name = ""
		}
	}
	return res
}

// TestRdmaCoreSuite runs the whole of rdma-core's test suite (every
// module of tests/, as python3-pyverbs ships it) through softnic exec on
// end A's device, as root, as a user of a RoCE adapter would to check it:
// no test may fail or error but those of suiteFailsYet, and a test may
// skip only for a reason of suiteSkips, each counted and logged by class.
func TestRdmaCoreSuite(t *testing.T) {
	w := newWorld(t, "python3-pyverbs", "python3", "gunzip")
	dir := rdmaCoreTests(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := append([]string{"netns", "exec", w.pair.A.Namespace}, w.execArgs(&w.pair.A)...)
	args = append(args, "/usr/bin/python3", filepath.Join(dir, "run_tests.py"), "--dev", w.a.Name, "--port", "1",
		"--gid", fmt.Sprint(w.gidIndex(t, w.a)), "-v")
	out, _ := combined(w.command(ctx, "ip", args...))
	res := string(out)
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests? in `).FindStringSubmatch(res)
	require.NotNil(t, ran, "run_tests.py said:\n%s", systest.Tail(res, 60))
	outcomes := parseSuite(res)
	require.Equal(t, ran[1], fmt.Sprint(len(outcomes)), "results read for the tests run:\n%s", systest.Tail(res, 60))
	passed, bad, failsYet, skipped := 0, []string(nil), map[string]bool{}, map[string][]string{}
	for _, o := range outcomes {
		switch {
		case o.result == "ok":
			passed++
		case o.result == "skipped" && skipClass(o) != "":
			skipped[skipClass(o)] = append(skipped[skipClass(o)], o.name+": "+o.reason)
		case (o.result == "FAIL" || o.result == "ERROR") && suiteFailsYet[o.name] != "":
			failsYet[o.name] = true
		default:
			bad = append(bad, fmt.Sprintf("%s: %s %s", o.name, o.result, o.reason))
		}
	}
	assert.Empty(t, bad, "tests that failed, errored or skipped for a reason of softnic's:\n%s", firstError(res))
	for name, why := range suiteFailsYet {
		assert.True(t, failsYet[name], "%s passes now (it failed on %s): take it from suiteFailsYet", name, why)
	}
	classes := make([]string, 0, len(skipped))
	for c := range skipped {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		t.Logf("skipped, %s: %d\n%s", c, len(skipped[c]), strings.Join(skipped[c], "\n"))
	}
	t.Logf("rdma-core's suite: %s tests run, %d passed, %d failing yet", ran[1], passed, len(failsYet))
}

// skipClass is the class of suiteSkips o's skip is in, or "".
func skipClass(o suiteOutcome) string {
	for _, s := range suiteSkips {
		if s.tests.MatchString(o.name) && s.reasons.MatchString(o.reason) {
			return s.class
		}
	}
	return ""
}

// parseSuite must read every form of result line run_tests.py writes.
func TestParseSuite(t *testing.T) {
	out := "test_a (tests.m.C.test_a) ... ok\n" +
		"test_b (tests.m.C.test_b)\nA docstring ... skipped 'No such thing'\n" +
		"test_c (tests.m.C.test_c) ... printed() = 0\nok\n" +
		"test_d (tests.m.D.test_d) ... FAIL\n" +
		"======\nFAIL: test_d (tests.m.D.test_d)\nTraceback ... \n"
	assert.Equal(t, []suiteOutcome{{"tests.m.C.test_a", "ok", ""}, {"tests.m.C.test_b", "skipped", "No such thing"},
		{"tests.m.C.test_c", "ok", ""}, {"tests.m.D.test_d", "FAIL", ""}}, parseSuite(out))
}
