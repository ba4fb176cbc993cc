package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/ibv"
)

// softnic stat res prints a line per served device in rdma resource
// show's layout, and with -d a line per session.
func TestStatResCommand(t *testing.T) {
	dir, c := serveMemAB(t)
	pd, err := c.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 4096)
	_, err = c.RegMR(pd, buf, ibv.AccessLocalWrite)
	require.NoError(t, err)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	_, err = c.CreateQP(hostifQP(pd, cq.Handle))
	require.NoError(t, err)
	// Two rdma_cm IDs, one of them listening.
	ch, err := c.CMCreateChannel()
	require.NoError(t, err)
	defer ch.File.Close()
	_, err = c.CMCreateID(ch.Handle, 0x0106, 1)
	require.NoError(t, err)
	listener, err := c.CMCreateID(ch.Handle, 0x0106, 2)
	require.NoError(t, err)
	_, err = c.CMBind(listener, netip.AddrPortFrom(netip.IPv4Unspecified(), 7471))
	require.NoError(t, err)
	_, err = c.CMListen(listener, 1)
	require.NoError(t, err)

	stat := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		status := runStat(append(append([]string{"res"}, args...), "--run-dir", dir), &out, &errOut)
		return out.String(), errOut.String(), status
	}
	out, errOut, status := stat()
	require.Zero(t, status, errOut)
	require.Equal(t, "0: softnic_memA: pd 1 cq 1 qp 1 cm_id 2 mr 1 ctx 1 srq 0\n"+
		"1: softnic_memB: pd 0 cq 0 qp 0 cm_id 0 mr 0 ctx 0 srq 0\n", out)

	out, errOut, status = stat("-d", "memA")
	require.Zero(t, status, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Equal(t, "0: softnic_memA: pd 1 cq 1 qp 1 cm_id 2 mr 1 ctx 1 srq 0", lines[0])
	comm, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err)
	require.Regexp(t, fmt.Sprintf(`^dev softnic_memA ctxn \d+ pid %d comm %s pd 1 cq 1 qp 1 cm_id 2 cm_listen 1 mr 1 srq 0 ah 0 comp_channel 0$`,
		os.Getpid(), strings.TrimSpace(string(comm))), lines[1])

	// stat res cm_id: a line per ID, as rdma resource show cm_id.
	out, errOut, status = stat("cm_id", "-d", "memA")
	require.Zero(t, status, errOut)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	t.Logf("softnic stat res cm_id -d memA:\n%s", out)
	who := fmt.Sprintf("pid %d comm %s", os.Getpid(), strings.TrimSpace(string(comm)))
	assert.Regexp(t, `^link softnic_memA/1 cm-idn \d+ state IDLE ps TCP `+who+`$`, lines[0])
	assert.Regexp(t, `^link softnic_memA/1 cm-idn \d+ state LISTEN ps TCP `+who+` src-addr 0\.0\.0\.0:7471$`, lines[1])
	out, _, status = stat("cm_id")
	require.Zero(t, status)
	assert.Equal(t, 2, strings.Count(out, "cm-idn"), "every device's IDs:\n%s", out)
	_, _, status = stat("cm_ids")
	require.Equal(t, 2, status)

	_, errOut, status = stat("-d", "memC")
	require.Equal(t, 1, status)
	require.Contains(t, errOut, `no device or interface "memC" here; `)
	_, _, status = stat("extra")
	require.Equal(t, 2, status)

	require.NoError(t, c.Close())
	require.Eventually(t, func() bool {
		out, _, _ = stat()
		return strings.HasPrefix(out, "0: softnic_memA: pd 0 cq 0 qp 0 cm_id 0 mr 0 ctx 0 srq 0\n")
	}, 5*time.Second, time.Millisecond, "the closed session's objects stay:\n%s", out)

	// A socket nobody listens on (a killed daemon's) is an error, and the
	// other devices are still listed.
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "softnic_memZ.sock"), Net: "unixpacket"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	ln.Close()
	out, errOut, status = stat()
	require.Equal(t, 1, status)
	require.Contains(t, errOut, "softnic_memZ: ")
	require.Contains(t, out, "1: softnic_memB: pd 0 ")
}
