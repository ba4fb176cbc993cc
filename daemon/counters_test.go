package daemon_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/counters"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// A monitor reads the device's counters and a QP's, without a session;
// a WRITE through the daemon moves the QP's sent_pkts and the device's,
// and a QP that does not exist is ENOENT.
func TestCountersByMonitor(t *testing.T) {
	r := newRig(t)
	q := connectClient(t, r)
	m, err := hostsession.DialMonitor(r.socket)
	require.NoError(t, err)
	defer m.Close()
	before, err := m.DeviceCounters()
	require.NoError(t, err)
	for i, name := range verbs.RXECounters {
		require.Equal(t, name, before[i].Name)
	}
	_, ok := counters.Get(before, "doorbell_wakeups")
	require.True(t, ok)
	require.Greater(t, len(before), 84, "more counters than one reply holds: paged")

	require.NoError(t, q.qp.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL: []ibv.SGE{q.mr.SGE(0, 4096)}, RemoteAddr: r.pmr.Addr(), RKey: r.pmr.RKey()}))
	require.Equal(t, ibv.WCSuccess, q.poll(t).Status)

	qc, err := m.QPCounters(q.qp.QPN)
	require.NoError(t, err)
	sent, _ := counters.Get(qc, "sent_pkts")
	rcvd, _ := counters.Get(qc, "rcvd_pkts")
	require.NotZero(t, sent)
	require.NotZero(t, rcvd, "the ACK")
	after, err := m.DeviceCounters()
	require.NoError(t, err)
	b, _ := counters.Get(before, "sent_pkts")
	a, _ := counters.Get(after, "sent_pkts")
	require.GreaterOrEqual(t, a-b, sent)

	_, err = m.QPCounters(0xfffff0)
	var ce *hostsession.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, unix.ENOENT, ce.Errno)
	res, err := m.Resources()
	require.NoError(t, err)
	require.Equal(t, 1, res.Sessions, "the monitor opened no session")
}
