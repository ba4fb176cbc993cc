package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv carries the command line a test runs in a child process of
// the test binary (TestMain), on a memory device named memA, so that a
// signal can be sent to it alone.
const childEnv = "SOFTNIC_TEST_CHILD"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		os.Exit(runChildCommand(strings.Fields(args)))
	}
	os.Exit(m.Run())
}

// runChildCommand runs softnic with args, its openDevice giving memA, a
// device on a memory link whose other end nobody answers.
func runChildCommand(args []string) int {
	la, _ := memlink.Pair(memlink.Config{})
	dev, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 99
	}
	openDevice = func(name string, _ int) (perftest.Device, func(), error) {
		if name != "memA" {
			return perftest.Device{}, nil, fmt.Errorf("no test device %q", name)
		}
		return perftest.Device{Verbs: dev, Name: name, LinkMTU: la.MTU()}, func() {}, nil
	}
	return run(args, os.Stdout, os.Stderr)
}

// startChild starts softnic args in a child process and returns it with
// its stdout, read line by line, and its stderr.
func startChild(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, " "))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewReader(out), &stderr
}

// waitLine reads r until a line containing s (the child is then blocked
// after printing it).
func waitLine(t *testing.T, r *bufio.Reader, s string) {
	t.Helper()
	for {
		l, err := r.ReadString('\n')
		require.NoError(t, err, "no line %q", s)
		if strings.Contains(l, s) {
			return
		}
	}
}

// interruptChild sends SIGINT to cmd, as Ctrl-C does, and returns its
// exit status.
func interruptChild(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit: %v", err)
	return exit.ExitCode()
}

// TestCtrlCServerWaiting: Ctrl-C on a perf server waiting for its client
// says it was interrupted, with status 130, not that an accept failed.
func TestCtrlCServerWaiting(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "write_bw", "-d", "memA", "-p", freePort(t)},
		{"pingpong", "-d", "memA", "-p", freePort(t)},
	} {
		cmd, out, stderr := startChild(t, args...)
		waitLine(t, out, map[string]string{"perf": "Waiting for client to connect", "pingpong": "local address"}[args[0]])
		assert.Equal(t, 130, interruptChild(t, cmd), "%v", args)
		assert.Equal(t, "softnic "+args[0]+": interrupted\n", stderr.String(), "%v", args)
	}
}

// TestCtrlCClientWaiting: Ctrl-C on a perf client whose server accepted
// and then said nothing (a client blocked in the exchange) says it was
// interrupted, with status 130.
func TestCtrlCClientWaiting(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	cmd, _, stderr := startChild(t, "perf", "write_bw", "-d", "memA", "-p", port, "127.0.0.1")
	conn, err := ln.Accept() // the client dialled: its signal handler is set
	require.NoError(t, err)
	defer conn.Close()
	assert.Equal(t, 130, interruptChild(t, cmd))
	assert.Equal(t, "softnic perf: interrupted\n", stderr.String())
}
