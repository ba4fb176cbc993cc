package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHelpDocumentsEveryFlag: `softnic help` lists every command, and
// `softnic help CMD` shows each of CMD's flags with its default (or says
// it is required).
func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"help"}, &out, &errOut))
	for name := range commands {
		assert.Regexp(t, `(?m)^  `+name+` +\S`, out.String(), "softnic help lists %s", name)
	}
	flagLine := regexp.MustCompile(`^  -`)
	for name := range commands {
		out.Reset()
		require.Equal(t, 0, run([]string{"help", name}, &out, &errOut), name)
		lines := strings.Split(out.String(), "\n")
		flags := 0
		for i, l := range lines {
			if !flagLine.MatchString(l) {
				continue
			}
			flags++
			require.Less(t, i+1, len(lines), "%s: %q has no description", name, l)
			desc := lines[i+1]
			assert.True(t, strings.Contains(desc, "default") || strings.Contains(desc, "required"),
				"softnic help %s: %s\n%s\nsays no default", name, l, desc)
		}
		switch name {
		case "inspect", "version", "completion":
			assert.Zero(t, flags)
		case "rping": // rping's own usage, then its defaults
			assert.Contains(t, out.String(), "defaults: -S 64, -C 0 (ping until stopped), -p 7174")
			assert.Contains(t, out.String(), "--pcap FILE")
		default:
			assert.Positive(t, flags, "softnic help %s shows no flag:\n%s", name, out.String())
		}
		if name == "daemon" || name == "perf" || name == "pingpong" {
			for _, f := range []string{"--pcap FILE", "--pcap-size SIZE", "--snaplen N", "--pcap-share PERCENT"} {
				assert.Contains(t, out.String(), "\n  "+f+"\n", "softnic help %s", name)
			}
		}
	}
	errOut.Reset()
	require.Equal(t, 2, run([]string{"help", "nosuch"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `softnic help: unknown command "nosuch"`)
}

// TestHelpMergesAliases: a flag and its "same as" names share a line, and
// zero defaults show.
func TestHelpMergesAliases(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"help", "pingpong"}, &out, &errOut))
	assert.Contains(t, out.String(), "\n  -s, --size int\n    \tsize of message to exchange (default 4096)\n")
	assert.Contains(t, out.String(), "\n  -l, --sl int\n    \tservice level (no meaning on RoCE; accepted) (default 0)\n")
	assert.Contains(t, out.String(), "\n  --ud\n    \tsoftnic: be ibv_ud_pingpong (UD QPs) instead of ibv_rc_pingpong (default off)\n")
	assert.NotContains(t, out.String(), "same as")
}

// TestNoSuchInterfaceMessages: every command that opens an interface says
// there is neither a device nor an interface by that name, and how to
// start a daemon. (The daemon waits for an interface that is not there:
// test/system TestDaemonWaitsForItsInterface.)
func TestNoSuchInterfaceMessages(t *testing.T) {
	runDir := t.TempDir()
	t.Setenv("SOFTNIC_RUN_DIR", runDir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "write_bw", "-d", "nosuch0"}, `no device or interface "nosuch0" here; no daemon serves this network namespace (run directory ` + runDir + `); start one: sudo softnic daemon -d IFACE --run-dir ` + runDir},
		{[]string{"pingpong", "-d", "nosuch0"}, `no device or interface "nosuch0" here; no daemon`},
		{[]string{"devinfo", "-d", "nosuch0"}, `no device or interface "nosuch0" here; no daemon`},
		{[]string{"pingpong", "-d", "softnic_nosuch0"}, `no device or interface "softnic_nosuch0" here; no daemon`},
	} {
		var out, errOut bytes.Buffer
		require.NotZero(t, run(c.args, &out, &errOut), "%v", c.args)
		assert.Contains(t, errOut.String(), c.want, "%v", c.args)
	}
}
