package rdmacm_test

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// cmMillisecond shrinks the IB CM's timeouts in these tests: Linux's
// values (a REQ retried 15 times, 4.8 s apart) become 15 × ~5 ms.
const cmMillisecond = time.Millisecond / 1000

// TestLeak200 opens and closes 200 connections in a row and finds no ID,
// QP, IB CM connection (once TIMEWAIT is over), goroutine or memory left
// over.
func TestLeak200(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a run without -short: 200 connections opened and closed")
	}
	// TIMEWAIT (2 s) lasts 40 ms.
	a, b := newSides(t, memlink.Config{}, time.Millisecond/50)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	lid, lch := listen(t, b, srvAddr)
	qpsA, qpsB := a.dev.QPs(), b.dev.QPs()
	oneConnection := func(i int) {
		cli := dial(t, a, srvAddr, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
		srv, _ := accept(t, lch, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
		nextEvent(t, cli.ch, rdmacm.EventEstablished)
		nextEvent(t, lch, rdmacm.EventEstablished)
		closer, other := cli, srv
		if i%2 == 1 { // alternate who disconnects
			closer, other = srv, cli
		}
		require.NoError(t, closer.id.Disconnect())
		nextEvent(t, closer.ch, rdmacm.EventDisconnected)
		nextEvent(t, other.ch, rdmacm.EventDisconnected)
		require.NoError(t, cli.id.Destroy())
		require.NoError(t, srv.id.Destroy())
		require.NoError(t, cli.mr.Dereg())
		require.NoError(t, srv.mr.Dereg())
		cli.ch.Close()
	}
	// The first connections start what stays: timers' goroutines, pools,
	// the tables' room.
	for i := range 50 {
		oneConnection(i)
	}
	before := runtime.NumGoroutine()
	heapBefore := heapInUse(t, a, b)
	for i := 1; i <= 200; i++ {
		oneConnection(i)
	}
	assert.Equal(t, 1, a.cm.IDs()+b.cm.IDs(), "only the listening ID is left")
	assert.Equal(t, qpsA, a.dev.QPs())
	assert.Equal(t, qpsB, b.dev.QPs())
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, after, before, "goroutines")
	heapAfter := heapInUse(t, a, b)
	t.Logf("heap in use: %d KiB before the 200 connections, %d KiB after", heapBefore>>10, heapAfter>>10)
	// A connection's state is over 8 KiB (QP rings, a CQ of 64, a 4 KiB
	// MR, CM state): 200 left behind would hold 1.6 MiB. The heap grows
	// some 100-200 KiB anyway (maps keep their room, spans fragment;
	// 1000 connections grew it 330 KiB, not five times that).
	assert.Less(t, int64(heapAfter)-int64(heapBefore), int64(512<<10), "heap growth over 200 connections")
	require.NoError(t, lid.Destroy())
}

// TestPeerVanishesMidHandshake: the server's device goes away after the
// REQ arrives; the client's REQ retries run out and it reports
// EventUnreachable, and destroying its ID leaves nothing behind.
func TestPeerVanishesMidHandshake(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, cmMillisecond)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	_, lch := listen(t, b, srvAddr)
	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{})
	nextEvent(t, lch, rdmacm.EventConnectRequest)
	b.dev.Close() // the peer vanishes without a word
	ev := nextEvent(t, cli.ch, rdmacm.EventUnreachable)
	assert.ErrorIs(t, ev.Err, rdmacm.ErrTimedOut)
	qps := a.dev.QPs()
	require.NoError(t, cli.id.Destroy())
	assert.Equal(t, qps-1, a.dev.QPs(), "Destroy destroys the ID's QP")
	assert.Zero(t, a.cm.IDs())
}

// TestEstablishedPeerVanishes: the server's device goes away while
// connected; the client's Disconnect ends in EventDisconnected after the
// DREQ's retries.
func TestEstablishedPeerVanishes(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, cmMillisecond)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	_, lch := listen(t, b, srvAddr)
	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{})
	accept(t, lch, &rdmacm.ConnParam{})
	nextEvent(t, cli.ch, rdmacm.EventEstablished)
	b.dev.Close()
	require.NoError(t, cli.id.Disconnect())
	nextEvent(t, cli.ch, rdmacm.EventDisconnected)
	require.NoError(t, cli.id.Destroy())
}

// TestConnectUnderLoss connects, exchanges and disconnects 20 times with
// 5% of the frames lost each way: the CM's retries carry every handshake
// through.
func TestConnectUnderLoss(t *testing.T) {
	lc := memlink.Config{Seed: 7, AtoB: memlink.Faults{Loss: 0.05}, BtoA: memlink.Faults{Loss: 0.05}}
	a, b := newSides(t, lc, time.Millisecond/50)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	_, lch := listen(t, b, srvAddr)
	for range 20 {
		cli := dial(t, a, srvAddr, &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7})
		srv, _ := accept(t, lch, &rdmacm.ConnParam{RNRRetryCount: 7})
		nextEvent(t, cli.ch, rdmacm.EventEstablished)
		nextEvent(t, lch, rdmacm.EventEstablished)
		copy(cli.mr.Bytes(), "ping")
		require.NoError(t, cli.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{cli.mr.SGE(0, 4)}}))
		cli.waitWC(t)
		srv.waitWC(t)
		require.NoError(t, cli.id.Disconnect())
		nextEvent(t, cli.ch, rdmacm.EventDisconnected)
		nextEvent(t, lch, rdmacm.EventDisconnected)
		require.NoError(t, cli.id.Destroy())
		require.NoError(t, srv.id.Destroy())
	}
}

// heapInUse waits until both devices' IB CMs forgot every connection (their
// TIMEWAIT over) and returns the heap in use after a collection.
func heapInUse(t *testing.T, sides ...*side) uint64 {
	t.Helper()
	for _, s := range sides {
		require.Eventually(t, func() bool { return s.dev.CM().Conns() == 0 }, 10*time.Second, time.Millisecond,
			"IB CM connections left")
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestTimewaitExit: after a disconnection both IDs, still open, hear
// EventTimewaitExit once the IB CM's TIMEWAIT (2 s, shrunk here) is over.
func TestTimewaitExit(t *testing.T) {
	a, b := newSides(t, memlink.Config{}, cmMillisecond)
	srvAddr := netip.AddrPortFrom(addrB, 7174)
	_, lch := listen(t, b, srvAddr)
	cli := dial(t, a, srvAddr, &rdmacm.ConnParam{})
	srv, _ := accept(t, lch, &rdmacm.ConnParam{})
	nextEvent(t, cli.ch, rdmacm.EventEstablished)
	nextEvent(t, lch, rdmacm.EventEstablished)
	require.NoError(t, srv.id.Disconnect())
	nextEvent(t, cli.ch, rdmacm.EventDisconnected)
	nextEvent(t, lch, rdmacm.EventDisconnected)
	assert.Same(t, cli.id, nextEvent(t, cli.ch, rdmacm.EventTimewaitExit).ID)
	assert.Same(t, srv.id, nextEvent(t, lch, rdmacm.EventTimewaitExit).ID)
}
