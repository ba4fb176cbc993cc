package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBashCompletion sources `softnic completion bash` in bash and
// completes command lines with it, as bash does on TAB: the words offered
// for the last word of each line.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("missing: bash, whose completion script this is")
	}
	var script, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"completion", "bash"}, &script, &errOut), errOut.String())
	dir := t.TempDir()
	file := filepath.Join(dir, "softnic.bash")
	require.NoError(t, os.WriteFile(file, script.Bytes(), 0o644))
	runDir, other := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(runDir, "rxe0.sock"), filepath.Join(runDir, "softnic_veth0.sock"),
		filepath.Join(runDir, "rxe0.lock"), filepath.Join(other, "mlx5_0.sock")} {
		require.NoError(t, os.WriteFile(f, nil, 0o644))
	}
	complete := func(line string) []string {
		t.Helper()
		// COMP_WORDS as bash splits the line; a trailing space starts a new, empty word.
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", `source "$1" && COMP_WORDS=(`+strings.Join(quoted, " ")+
			`) && COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && _softnic && printf '%s\n' "${COMPREPLY[@]}"`, "bash", file)
		cmd.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+runDir)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", line, out)
		return strings.Fields(string(out))
	}
	assert.Equal(t, []string{"perf", "pingpong"}, complete("softnic p"))
	assert.Equal(t, []string{"stat"}, complete("softnic help st"))
	assert.Equal(t, []string{"write_bw", "write_lat"}, complete("softnic perf wr"))
	assert.Equal(t, []string{"--ib-dev", "--ib-port"}, complete("softnic perf write_bw --ib"))
	assert.Equal(t, []string{"rxe0", "softnic_veth0"}, complete("softnic perf write_bw -d "))
	assert.Equal(t, []string{"rxe0", "softnic_veth0"}, complete("softnic exec -d "))
	assert.Equal(t, []string{"mlx5_0"}, complete("softnic stat --run-dir "+other+" -d "))
	assert.Equal(t, []string{"res"}, complete("softnic stat r"))
	assert.Equal(t, []string{"cm_id"}, complete("softnic stat res "))
	assert.Equal(t, []string{"--provider", "--run-dir", "--sysfs"}, complete("softnic exec --"))
	assert.Contains(t, complete("softnic exec -d rxe0 -- tru"), "true")
	assert.Contains(t, complete("softnic daemon -d "), "lo", "the daemon takes interfaces")
	assert.NotContains(t, complete("softnic daemon -d "), "rxe0")
	assert.Empty(t, complete("softnic rping -d "), "rping's -d is debug, no value")
	assert.Equal(t, []string{"bash"}, complete("softnic completion "))
}
