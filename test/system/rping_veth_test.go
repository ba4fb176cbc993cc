package system

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rpingClientWhenListening runs the client command made by mk, again
// while the server is not yet listening (rping's refusal, REJ reason 8),
// as a script sleeping before the real rping's client would.
func rpingClientWhenListening(t *testing.T, mk func() *exec.Cmd) (string, error) {
	t.Helper()
	for try := 0; ; try++ {
		began := time.Now()
		out, err := mk().CombinedOutput()
		if !strings.Contains(string(out), "RDMA_CM_EVENT_REJECTED, error 8") || try == 50 {
			t.Logf("client: %d refusals before, %v this run", try, time.Since(began))
			return string(out), err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRpingOverVeth runs softnic rping between two namespaces over
// AF_XDP, IPv4 and IPv6, -C 100 -v -V with sizes below and above the
// path MTU, and a client to a port nobody listens on.
func TestRpingOverVeth(t *testing.T) {
	bin, p, _, _ := vethSoftnic(t)
	for _, fam := range []struct {
		name string
		addr string
	}{{"IPv4", p.A.Addr4().String()}, {"IPv6", p.A.Addr6().String()}} {
		for _, size := range []string{"64", "4000"} {
			t.Run(fam.name+"/"+size, func(t *testing.T) {
				srv := p.A.Command(bin, "rping", "-s", "-v", "-a", fam.addr, "-S", size)
				var sout strings.Builder
				srv.Stdout, srv.Stderr = &sout, &sout
				require.NoError(t, srv.Start())
				cout, cerr := rpingClientWhenListening(t, func() *exec.Cmd {
					return p.B.Command(bin, "rping", "-c", "-vV", "-a", fam.addr, "-C", "100", "-S", size)
				})
				serr := srv.Wait()
				require.True(t, cerr == nil && serr == nil, "client %v:\n%s\nserver %v:\n%s", cerr, cout, serr, sout.String())
				assert.Equal(t, 100, strings.Count(cout, "ping data: rdma-ping-"), cout)
				assert.Contains(t, cout, "ping data: rdma-ping-99: ")
				assert.Equal(t, 100, strings.Count(sout.String(), "server ping data: rdma-ping-"), sout.String())
				assert.Contains(t, sout.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n")
			})
		}
	}
	// A port nobody listens on, on a host where softnic runs (here a -P
	// server on another port): its CM answers the REQ with REJ 8. (With
	// no softnic on the host nothing answers, and the client ends with
	// RDMA_CM_EVENT_UNREACHABLE once the CM's REQ retries run out.)
	t.Run("refused", func(t *testing.T) {
		srv := p.A.Command(bin, "rping", "-s", "-P", "-a", p.A.Addr4().String())
		require.NoError(t, srv.Start())
		defer func() {
			require.NoError(t, srv.Process.Signal(os.Interrupt))
			var exit *exec.ExitError
			require.ErrorAs(t, srv.Wait(), &exit)
			assert.Equal(t, 130, exit.ExitCode(), "the -P server stopped by SIGINT")
		}()
		// The server's port answers once it listens.
		out, err := rpingClientWhenListening(t, func() *exec.Cmd {
			return p.B.Command(bin, "rping", "-c", "-a", p.A.Addr4().String(), "-C", "1")
		})
		require.NoError(t, err, out)
		began := time.Now()
		out2, err := p.B.Command(bin, "rping", "-c", "-a", p.A.Addr4().String(), "-p", "7999").CombinedOutput()
		took := time.Since(began)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s", out2)
		assert.Equal(t, 255, exit.ExitCode())
		assert.Equal(t, "cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n", string(out2))
		// The REJ itself is the answer: with nobody's CM answering, the
		// client would end UNREACHABLE after its REQ retries instead.
		t.Logf("refused client ran %v, softnic's start-up included", took)
	})
}
