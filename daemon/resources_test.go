package daemon_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

func commOf(r hostif.SessionResources) string { return strings.TrimRight(string(r.Comm[:]), "\x00") }

// A monitor sees each session's objects and the device's totals, opens no
// session itself, and sees a closed session's objects go.
func TestResourcesByMonitor(t *testing.T) {
	r := newRig(t)
	m, err := hostsession.DialMonitor(r.socket)
	require.NoError(t, err)
	defer m.Close()
	res, err := m.Resources()
	require.NoError(t, err)
	require.Zero(t, res.Sessions)
	require.Empty(t, res.Session)

	q := connectClient(t, r) // a PD, an MR, a CQ and an RC QP
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer other.Close()
	pd, err := other.AllocPD()
	require.NoError(t, err)
	_, err = other.CreateCompChannel()
	require.NoError(t, err)
	_, err = other.CreateSRQ(pd, 16, 1, 0, 0)
	require.NoError(t, err)
	gidB, err := r.b.GID(0)
	require.NoError(t, err)
	_, err = other.CreateAH(pd, &ibv.AddressVector{DGID: gidB, HopLimit: 64})
	require.NoError(t, err)

	res, err = m.Resources()
	require.NoError(t, err)
	require.Equal(t, 2, res.Sessions, "the monitor is no session")
	require.Equal(t, hostif.ResourceCounts{PD: 2, CQ: 1, QP: 1, MR: 1, SRQ: 1, AH: 1, Channel: 1}, res.Total)
	require.Len(t, res.Session, 2)
	comm, err := os.ReadFile("/proc/self/comm")
	require.NoError(t, err)
	for _, s := range res.Session {
		require.Equal(t, uint32(os.Getpid()), s.PID)
		require.Equal(t, strings.TrimSpace(string(comm)), commOf(s))
	}
	require.Less(t, res.Session[0].ID, res.Session[1].ID)
	require.Equal(t, hostif.ResourceCounts{PD: 1, CQ: 1, QP: 1, MR: 1}, res.Session[0].Counts)
	require.Equal(t, hostif.ResourceCounts{PD: 1, SRQ: 1, AH: 1, Channel: 1}, res.Session[1].Counts)

	require.NoError(t, q.c.Close())
	require.Eventually(t, func() bool {
		res, err = m.Resources()
		require.NoError(t, err)
		return res.Sessions == 1
	}, 5*time.Second, time.Millisecond, "the closed session's objects stay")
	require.Equal(t, hostif.ResourceCounts{PD: 1, SRQ: 1, AH: 1, Channel: 1}, res.Total)
}

// More sessions than a reply holds are read in several replies, each
// session once.
func TestResourcesPaged(t *testing.T) {
	r := newRig(t)
	const n = hostif.ResourcesPerReply + 8
	for range n {
		c, err := hostsession.Dial(r.socket)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.AllocPD()
		require.NoError(t, err)
	}
	m, err := hostsession.DialMonitor(r.socket)
	require.NoError(t, err)
	defer m.Close()
	res, err := m.Resources()
	require.NoError(t, err)
	require.Equal(t, n, res.Sessions)
	require.Equal(t, uint32(n), res.Total.PD)
	require.Len(t, res.Session, n)
	for i := 1; i < n; i++ {
		require.Less(t, res.Session[i-1].ID, res.Session[i].ID)
	}
}

// A connection that did not say hello may ask for the resources but
// nothing else.
func TestMonitorOpensNoSession(t *testing.T) {
	r := newRig(t)
	m, err := hostsession.DialMonitor(r.socket)
	require.NoError(t, err)
	defer m.Close()
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, hostif.MaxMessage)
	msg, err := hostif.Encode(buf, hostif.Header{Op: hostif.OpAllocPD, Seq: 1}, hostif.Empty{})
	require.NoError(t, err)
	require.NoError(t, m.Raw(msg, 5*time.Second), "an error reply, not the end of the connection")
	res, err := m.Resources()
	require.NoError(t, err)
	require.Equal(t, 1, res.Sessions)
	require.Zero(t, res.Total.PD, "the monitor allocated nothing")
}
