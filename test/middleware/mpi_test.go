package middleware

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// mpiProgram compiles testdata/mpicheck.c with Open MPI's mpicc into the
// tools' directory, once.
func mpiProgram(t *testing.T) string {
	t.Helper()
	dir := systest.ToolsDir(t)
	mpi.once.Do(func() {
		prog := filepath.Join(dir, "mpicheck")
		src, err := filepath.Abs(filepath.Join("testdata", "mpicheck.c"))
		if err != nil {
			mpi.err = err
			return
		}
		if out, err := exec.Command("mpicc", "-O1", "-Wall", "-Werror", "-o", prog, src).CombinedOutput(); err != nil {
			mpi.err = fmt.Errorf("mpicc mpicheck.c: %v: %s", err, out)
			return
		}
		mpi.prog = prog
	})
	require.NoError(t, mpi.err)
	return mpi.prog
}

// mpiTransports are the two ways Open MPI reaches an RDMA device: its UCX
// point-to-point layer over UCX's rc transport, and its cm layer over
// libfabric's verbs provider with ofi_rxm for reliable datagrams. UCX is
// given UCX_TLS=rc because ranks on one machine, in whichever network
// namespaces, reach each other through UCX's shared-memory transports
// (same boot ID, same IPC namespace), which two hosts would not.
var mpiTransports = []struct {
	name string
	args []string
}{
	{"ucx", []string{"--mca", "pml", "ucx", "-x", "UCX_TLS=rc"}},
	{"ofi", []string{"--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "verbs;ofi_rxm"}},
}

// mpiOK is mpicheck's last word when every byte was right.
var mpiOK = regexp.MustCompile(`(?m)^mpicheck: ok: (\d+) bytes checked`)

// TestOpenMPI runs mpicheck (testdata/mpicheck.c: buffers of 1 B to
// 1 MiB each way, three rounds, every byte checked) through Open MPI over
// each transport: with one rank in each namespace, mpirun as root in end
// A's namespace launching an orted on each end through
// testdata/rsh-agent.sh, which enters the end's namespace and runs the
// orted as nobody through softnic exec; and as nobody, mpirun and both
// ranks on end A's device.
func TestOpenMPI(t *testing.T) {
	w := newWorld(t, "openmpi-bin libopenmpi-dev", "mpirun", "mpicc")
	prog := mpiProgram(t)
	// Each orted, as nobody, checks that the agent's path exists: a copy
	// nobody can reach, wherever the checkout is (Debian 12 makes homes
	// 0700).
	script, err := os.ReadFile(filepath.Join("testdata", "rsh-agent.sh"))
	require.NoError(t, err)
	agent := filepath.Join(userDir(t), "rsh-agent.sh")
	require.NoError(t, os.WriteFile(agent, script, 0o755))
	hostfile := filepath.Join(rootDir(t), "hosts")
	require.NoError(t, os.WriteFile(hostfile, []byte("hosta slots=1\nhostb slots=1\n"), 0o644))
	for _, tr := range mpiTransports {
		t.Run(tr.name+"/two-namespaces", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{"netns", "exec", w.pair.A.Namespace, "mpirun", "--allow-run-as-root",
				"--hostfile", hostfile, "-np", "2", "--map-by", "node", "--mca", "plm_rsh_agent", agent}, tr.args...)
			cmd := w.command(ctx, "ip", append(args, prog)...)
			cmd.Env = append(cmd.Env,
				fmt.Sprintf("MW_HOSTS=hosta=%s:%s hostb=%s:%s", w.pair.A.Namespace, w.pair.A.Ifname,
					w.pair.B.Namespace, w.pair.B.Ifname),
				"MW_SOFTNIC="+w.bin, "MW_RUN_DIR="+w.runDir, "MW_TMP="+userDir(t))
			before := w.snapshot(t)
			n := runMPI(t, cmd)
			d := w.delta(t, before)
			carried(t, "rank 0 to rank 1", d.a, d.b, n/2)
			carried(t, "rank 1 to rank 0", d.b, d.a, n/2)
		})
		t.Run(tr.name+"/one-device", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// a session directory of this run's own (see rsh-agent.sh)
			args := append([]string{"env", "TMPDIR=" + userDir(t), "mpirun", "-np", "2"}, tr.args...)
			before := w.snapshot(t)
			n := runMPI(t, w.user(ctx, &w.pair.A, append(args, prog)...))
			d := w.delta(t, before)
			carried(t, "between the ranks", d.a, d.a, n)
		})
	}
}

// runMPI runs mpirun's cmd, requires mpicheck's success and returns how
// many bytes it checked.
func runMPI(t *testing.T, cmd *exec.Cmd) int64 {
	t.Helper()
	out, err := combined(cmd)
	require.NoError(t, err, "mpirun: %s\n%s", firstError(out), systest.Tail(out, 40))
	m := mpiOK.FindStringSubmatch(out)
	require.NotNil(t, m, "mpicheck did not say ok:\n%s", out)
	assert.Regexp(t, `rank 1 of 2 on .* done`, out)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n
}
