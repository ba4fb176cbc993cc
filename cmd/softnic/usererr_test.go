package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The errors of the mistakes a new user makes (issue 36), each in the
// user's words with its fix. "lo" is an interface every network namespace
// has.

// TestNotServedMessages: a -d that names neither a device served here nor
// an interface one serves is told what to give instead, or how to start
// a daemon (which takes an interface, never a device name).
func TestNotServedMessages(t *testing.T) {
	served := []servedDevice{
		{name: "rxe0", iface: "lo", here: true},
		{name: "softnic_veth1", iface: "veth1", here: true},
		{name: "far", iface: "eth7"},
	}
	for _, c := range []struct {
		arg        string
		devs       []servedDevice
		needDaemon bool
		runDir     string
		want       string
	}{
		{"softnic_lo", served, false, "/run/softnic", "no device softnic_lo: interface lo is served as device rxe0; give -d rxe0 or -d lo"},
		{"softnic_lo", nil, true, "/run/softnic", "no daemon serves interface lo (whose device would be softnic_lo); start one: sudo softnic daemon -d lo"},
		{"lo", nil, true, "/tmp/r", "no daemon serves interface lo; start one: sudo softnic daemon -d lo --run-dir /tmp/r"},
		{"nosuch0", served, false, "/run/softnic", `no device or interface "nosuch0" here; devices served here: rxe0 (interface lo), softnic_veth1 (interface veth1)`},
		{"nosuch0", nil, true, "/run/softnic", `no device or interface "nosuch0" here; no daemon serves this network namespace (run directory /run/softnic); start one: sudo softnic daemon -d IFACE (`},
	} {
		err := notServedError(c.runDir, c.arg, c.devs, c.needDaemon)
		require.Error(t, err, "%+v", c)
		assert.True(t, strings.HasPrefix(err.Error(), c.want), "%s:\n got %s\nwant %s", c.arg, err, c.want)
		assert.NotContains(t, err.Error(), "daemon -d softnic_", c.arg)
	}
	// A tool that runs on an interface itself needs no daemon for one.
	assert.NoError(t, notServedError("/run/softnic", "lo", nil, false))
}

// TestDeviceNameMessages: the commands say what notServedError says, and
// the daemon, given a device name, is told the interface.
func TestDeviceNameMessages(t *testing.T) {
	runDir := t.TempDir()
	t.Setenv("SOFTNIC_RUN_DIR", runDir)
	provider := filepath.Join(t.TempDir(), providerLib)
	require.NoError(t, os.WriteFile(provider, nil, 0o644))
	t.Setenv("SOFTNIC_PROVIDER", provider)
	noDaemon := "no daemon serves interface lo (whose device would be softnic_lo); start one: sudo softnic daemon -d lo --run-dir " + runDir
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "write_bw", "-d", "softnic_lo"}, noDaemon},
		{[]string{"pingpong", "-d", "softnic_lo"}, noDaemon},
		{[]string{"devinfo", "-d", "softnic_lo"}, noDaemon},
		{[]string{"stat", "-d", "softnic_lo"}, noDaemon},
		{[]string{"stat", "res", "-d", "softnic_lo"}, noDaemon},
		{[]string{"exec", "-d", "softnic_lo", "--", "true"}, noDaemon},
		{[]string{"exec", "-d", "lo", "--", "true"}, "no daemon serves interface lo; start one: sudo softnic daemon -d lo --run-dir " + runDir},
		{[]string{"exec", "--", "true"}, "no daemon serves this network namespace (run directory " + runDir + "); start one: sudo softnic daemon -d IFACE --run-dir " + runDir},
		{[]string{"perf", "write_bw", "-d", "nosuch0"}, `no device or interface "nosuch0" here; no daemon serves this network namespace`},
		{[]string{"daemon", "-d", "softnic_lo", "--run-dir", runDir}, `no network interface "softnic_lo": the daemon takes an interface, and softnic_lo is the name of the device it makes of lo; give -d lo (or -d lo:softnic_lo)`},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 1, run(c.args, &out, &errOut), "%v: %s", c.args, errOut.String())
		assert.Contains(t, errOut.String(), c.want, "%v", c.args)
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"env"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "softnic env: no daemon serves this network namespace (run directory "+runDir+"); start one: sudo softnic daemon -d IFACE --run-dir "+runDir)
}

// TestUnknownPerfTest: a test name perftest does not have is told the
// ones it has.
func TestUnknownPerfTest(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"perf", "write", "-d", "lo"}, &out, &errOut))
	assert.Equal(t, "softnic perf: unknown test \"write\": the tests are write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat\n"+
		"  (run 'softnic perf -h' for the flags)\n", errOut.String())
}

// TestBadGIDIndex: a GID index that holds no GID fails before waiting for
// a peer, listing the valid indexes and their addresses.
func TestBadGIDIndex(t *testing.T) {
	useMemDevices(t)
	for _, args := range [][]string{
		{"perf", "write_bw", "-d", "memA", "-x", "5", "-p", freePort(t)},
		{"perf", "write_bw", "-d", "memA", "--gid-index=300", "-p", freePort(t), "127.0.0.1"},
		{"pingpong", "-d", "memA", "-g", "5", "-p", freePort(t)},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 1, run(args, &out, &errOut), "%v", args)
		idx := strings.TrimPrefix(args[4], "--gid-index=")
		if args[0] == "perf" && idx == "-x" {
			idx = args[5]
		} else if args[0] == "pingpong" {
			idx = args[4]
		}
		assert.Equal(t, "softnic "+args[0]+": GID index "+idx+": memA has no GID there; valid GID indexes: 0 (::ffff:10.0.0.1, IPv4 10.0.0.1)\n",
			errOut.String(), "%v", args)
		assert.NotContains(t, out.String(), "Waiting", "%v", args)
	}
}

// TestHelpExitsZero: -h and --help exit 0 for every command and
// subcommand, with the usage on stdout; exec's program keeps its own -h.
func TestHelpExitsZero(t *testing.T) {
	var lines [][]string
	for name := range commands {
		lines = append(lines, []string{name})
	}
	lines = append(lines, []string{"stat", "res"}, []string{"perf", "write_bw"}, []string{"perf", "write"},
		[]string{"rping", "-s"}, []string{"help"}, []string{"completion", "bash"}, []string{"pingpong", "--ud"})
	for _, l := range lines {
		for _, h := range []string{"-h", "--help"} {
			var out, errOut bytes.Buffer
			args := append(append([]string{}, l...), h)
			assert.Equal(t, 0, run(args, &out, &errOut), "%v: %s", args, errOut.String())
			assert.Contains(t, out.String(), "softnic "+l[0], "%v: no usage on stdout", args)
			assert.Empty(t, errOut.String(), "%v", args)
		}
	}
}

func TestExecProgramHelp(t *testing.T) {
	assert.False(t, helpWanted("exec", []string{"--", "ib_write_bw", "-h"}))
	assert.False(t, helpWanted("exec", []string{"ib_write_bw", "-h"}))
	assert.True(t, helpWanted("exec", []string{"--sysfs=env", "-h", "ib_write_bw"}))
	assert.True(t, helpWanted("perf", []string{"write_bw", "-d", "eth0", "--help"}))
}

// TestExecEnvFlagStyle: exec and env show their flags as the other
// commands do: two dashes for long names, the default said once.
func TestExecEnvFlagStyle(t *testing.T) {
	for _, name := range []string{"exec", "env"} {
		var out, errOut bytes.Buffer
		require.Equal(t, 0, run([]string{"help", name}, &out, &errOut))
		help := out.String()
		assert.Contains(t, help, "\n  --run-dir DIR\n    \tthe daemons' run directory DIR (default $SOFTNIC_RUN_DIR, else /run/softnic)\n", name)
		assert.Contains(t, help, "\n  --provider PATH\n", name)
		assert.NotContains(t, help, "\n  -run-dir", name)
		assert.NotContains(t, help, `(default "`, "%s: flag.PrintDefaults' default after softnic's", name)
		for _, l := range strings.Split(help, "\n") {
			assert.LessOrEqual(t, strings.Count(l, "default"), 1, "%s: %q", name, l)
		}
	}
}

// TestPerfPeerGone: a server that closes the exchange before the test
// ended (interrupted, killed) is said to have gone away.
func TestPerfPeerGone(t *testing.T) {
	useMemDevices(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	var out, errOut bytes.Buffer
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	require.Equal(t, 1, run([]string{"perf", "write_bw", "-d", "memB", "-p", port, "127.0.0.1"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "softnic perf: the server went away before the test ended (was it interrupted?): ")
}

// TestTreelessDeviceName: a device name whose daemon published no tree,
// only its socket, is that daemon's device too (it was "no daemon serves
// it" while the socket existed): perf dials it.
func TestTreelessDeviceName(t *testing.T) {
	runDir := t.TempDir()
	t.Setenv("SOFTNIC_RUN_DIR", runDir)
	ln, err := net.Listen("unix", filepath.Join(runDir, "softnic_lo.sock"))
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // not a daemon: the dial fails after connecting
		}
	}()
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run([]string{"perf", "write_bw", "-d", "softnic_lo"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "softnic perf: open device softnic_lo: ", "dialled the device's socket")
	out.Reset()
	errOut.Reset()
	require.Equal(t, 0, run([]string{"devinfo", "-d", "softnic_lo"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "hca_id:\tsoftnic_lo\n")
}
