package system

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cProgram is a C test program from testdata that says what it checked,
// one line each ("ok  " or "FAIL"), and stops at named lines until the
// test writes a line to its stdin.
type cProgram struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	said  strings.Builder
}

// buildCProgram compiles testdata/NAME.c against libibverbs (and the
// libraries in libs, such as -lrdmacm) next to bin.
func buildCProgram(t *testing.T, ctx context.Context, bin, name string, libs ...string) string {
	prog := filepath.Join(filepath.Dir(bin), name)
	args := append([]string{"-O1", "-Wall", "-Werror", "-o", prog, filepath.Join("testdata", name+".c"), "-libverbs"}, libs...)
	out, err := exec.CommandContext(ctx, "cc", args...).CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	return prog
}

// startCProgram starts cmd with its stdin and stdout piped to the test.
func startCProgram(t *testing.T, cmd *exec.Cmd) *cProgram {
	p := &cProgram{cmd: cmd}
	var err error
	p.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p.lines = bufio.NewScanner(stdout)
	return p
}

// waitFor reads the program's lines until want; the test fails if the
// program ends first.
func (p *cProgram) waitFor(t *testing.T, want string) {
	t.Helper()
	for p.lines.Scan() {
		p.said.WriteString(p.lines.Text() + "\n")
		if p.lines.Text() == want {
			return
		}
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	t.Fatalf("the program ended before %q:\n%s", want, p.said.String())
}

// waitForPrefix reads the program's lines until one that starts with
// prefix and returns it; the test fails if the program ends first.
func (p *cProgram) waitForPrefix(t *testing.T, prefix string) string {
	t.Helper()
	for p.lines.Scan() {
		p.said.WriteString(p.lines.Text() + "\n")
		if strings.HasPrefix(p.lines.Text(), prefix) {
			return p.lines.Text()
		}
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	t.Fatalf("the program ended before a line %q...:\n%s", prefix, p.said.String())
	return ""
}

// tell writes line to the program's stdin.
func (p *cProgram) tell(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(p.stdin, line+"\n")
	require.NoError(t, err)
}

// resume lets the program go on from a stop.
func (p *cProgram) resume(t *testing.T) {
	_, err := io.WriteString(p.stdin, "go\n")
	require.NoError(t, err)
}

// finish reads the program to its end and checks it passed all of its
// checks, of which there must be want.
func (p *cProgram) finish(t *testing.T, want int) {
	t.Helper()
	for p.lines.Scan() {
		p.said.WriteString(p.lines.Text() + "\n")
	}
	err := p.cmd.Wait()
	t.Logf("the program said:\n%s", p.said.String())
	assert.NoError(t, err, "checks failed (the exit status counts them)")
	assert.NotContains(t, p.said.String(), "FAIL")
	assert.Equal(t, want, strings.Count(p.said.String(), "ok  "), "every check ran")
}
