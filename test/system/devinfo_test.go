package system

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/systest"
)

// TestDevinfoOnInterface runs softnic devinfo on a veth end of 9000-byte
// MTU, in its namespace, and on an interface there is none of.
func TestDevinfoOnInterface(t *testing.T) {
	netnstest.Integration(t)
	bin := systest.Softnic(t)
	pair := netnstest.NewT(t, netnstest.Config{MTU: 9000})
	code, out, errOut := exitOutputs(t, pair.A.Command(bin, "devinfo", "-v", "-d", pair.A.Ifname))
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "active_mtu:\t\t4096 (5)")
	assert.Contains(t, out, "GID[  1]:\t\t::ffff:"+pair.A.Addr4().String()+", RoCE v2")
	code, _, errOut = exitOutputs(t, exec.Command(bin, "devinfo", "-d", "no-such-interface"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no-such-interface")
}

// exitOutputs runs cmd and returns its exit status and its standard
// output and error apart; a command that could not run fails the test.
func exitOutputs(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	out, errOut, err := outputs(t, cmd)
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode(), out, errOut
	}
	require.NoError(t, err)
	return 0, out, errOut
}
