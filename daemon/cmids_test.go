package daemon_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
)

// A monitor lists every session's rdma_cm IDs in (session, handle) order,
// over several replies when there are more than one holds, each with its
// state as the kernel names it; a destroyed ID leaves the list.
func TestCMIDsByMonitor(t *testing.T) {
	r := newRig(t)
	m, err := hostsession.DialMonitor(r.socket)
	require.NoError(t, err)
	defer m.Close()
	ids, err := m.CMIDs()
	require.NoError(t, err)
	require.Empty(t, ids)

	var sessions [2]*hostsession.Conn
	var listener uint32
	for i := range sessions {
		c, err := hostsession.Dial(r.socket)
		require.NoError(t, err)
		defer c.Close()
		sessions[i] = c
		ch, err := c.CMCreateChannel()
		require.NoError(t, err)
		defer ch.File.Close()
		for range hostif.CMIDsPerReply - 10 {
			_, err := c.CMCreateID(ch.Handle, 0x0106, 0)
			require.NoError(t, err)
		}
		if i == 1 {
			listener, err = c.CMCreateID(ch.Handle, 0x0106, 0)
			require.NoError(t, err)
			_, err = c.CMBind(listener, netip.AddrPortFrom(netip.IPv4Unspecified(), 7471))
			require.NoError(t, err)
			_, err = c.CMListen(listener, 1)
			require.NoError(t, err)
		}
	}
	ids, err = m.CMIDs()
	require.NoError(t, err)
	want := 2*(hostif.CMIDsPerReply-10) + 1
	require.Len(t, ids, want, "more IDs than a reply holds")
	for i := 1; i < len(ids); i++ {
		a, b := ids[i-1], ids[i]
		require.True(t, a.Session < b.Session || (a.Session == b.Session && a.ID < b.ID), "order at %d", i)
	}
	last := ids[len(ids)-1]
	require.Equal(t, listener, last.ID)
	require.Equal(t, uint8(8), last.State, "LISTEN")
	require.Equal(t, uint16(7471), last.LocalPort)
	require.Equal(t, uint16(0x0106), last.PortSpace)
	require.Zero(t, last.QPType, "no QP")
	require.Equal(t, uint8(0), ids[0].State, "IDLE")

	require.NoError(t, sessions[1].CMDestroyID(listener))
	ids, err = m.CMIDs()
	require.NoError(t, err)
	require.Len(t, ids, want-1)
	require.NotEqual(t, uint8(8), ids[len(ids)-1].State)
}
