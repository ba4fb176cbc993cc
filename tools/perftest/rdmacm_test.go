package perftest

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// cmPair opens two devices on a memory link, each with its own CM (two
// hosts): a at 10.0.0.1, b at 10.0.0.2.
func cmPair(t *testing.T) (a, b Device, cma, cmb *rdmacm.CM) {
	t.Helper()
	a, b = memPair(t)
	var err error
	cma, err = rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{a.Verbs}})
	require.NoError(t, err)
	cmb, err = rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{b.Verbs}})
	require.NoError(t, err)
	t.Cleanup(func() { cma.Close(); cmb.Close() })
	return a, b, cma, cmb
}

// runBothCM runs a -R server on a and a -R client on b.
func runBothCM(t *testing.T, test oob.Test, tweak func(*Params)) (client, server string) {
	t.Helper()
	a, b, cma, cmb := cmPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sout, cout bytes.Buffer
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := NewParams(test)
		p.Server = true
		tweak(&p)
		serr = RunRDMACM(ctx, cma, a, CMPeer{}, p, &sout)
	}()
	p := NewParams(test)
	tweak(&p)
	// The client may ask before the server listens: it retries.
	peer := CMPeer{Server: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(p.Port)), Wait: 10 * time.Second}
	cerr := RunRDMACM(ctx, cmb, b, peer, p, &cout)
	wg.Wait()
	require.True(t, cerr == nil && serr == nil, "%v: client %v, server %v\nclient output:\n%s\nserver output:\n%s", test, cerr, serr, cout.String(), sout.String())
	for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		assert.Contains(t, out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm", side)
	}
	assert.Contains(t, sout.String(), " Waiting for client rdma_cm QP to connect\n")
	// Every ID is gone after the run, on both sides.
	assert.Zero(t, cma.IDs(), "server IDs left")
	assert.Zero(t, cmb.IDs(), "client IDs left")
	return cout.String(), sout.String()
}

func TestRDMACMBandwidthTests(t *testing.T) { testBandwidth(t, runBothCM) }

func TestRDMACMLatencyTests(t *testing.T) { testLatency(t, runBothCM) }

// TestRDMACMDuplex runs send_bw bidirectionally: both sides post
// receives and send on the rdma_cm-connected QPs.
func TestRDMACMDuplex(t *testing.T) {
	cout, sout := runBothCM(t, oob.SendBW, func(p *Params) { p.Iters, p.Size, p.Duplex = 200, 4096, true })
	for side, out := range map[string]string{"client": cout, "server": sout} {
		require.Len(t, bwLine.FindAllString(out, -1), 1, "%s output:\n%s", side, out)
	}
}

// TestRDMACMNoServer gives up when nobody listens: the server's CM
// rejects (no listener on the port) and the client retries until its wait
// is over.
func TestRDMACMNoServer(t *testing.T) {
	_, b, _, cmb := cmPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := NewParams(oob.WriteBW)
	peer := CMPeer{Server: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(p.Port)), Wait: 300 * time.Millisecond}
	start := time.Now()
	err := RunRDMACM(ctx, cmb, b, peer, p, &bytes.Buffer{})
	require.ErrorIs(t, err, errCMRefused)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "gave up before the wait")
	assert.Zero(t, cmb.IDs(), "IDs left")
}

// TestRDMACMServerDropsAbandoned has a client of 2 QPs connect one test
// QP and destroy it (as after an attempt whose other request was
// rejected), then connect two: the server forgets the first and ends with
// the other two.
func TestRDMACMServerDropsAbandoned(t *testing.T) {
	a, b, cma, cmb := cmPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := NewParams(oob.WriteBW)
	p.Server, p.NumQPs = true, 2
	require.NoError(t, p.prepare(a, &bytes.Buffer{}))
	r := &runCtx{p: &p, dev: a, ctx: ctx, cycle: 4096, cacheLine: 64, sizes: p.Sizes()}
	defer r.close()
	require.NoError(t, r.allocate())
	c := &cmConnector{cm: cma, ch: cma.NewEventChannel()}
	defer c.release(r)
	listen, err := listenCM(cma, c.ch, p.Port, 2)
	require.NoError(t, err)
	defer listen.Destroy()
	done := make(chan error, 1)
	go func() { done <- c.serverConnection(r) }()

	cq, err := b.Verbs.CreateCQ(4, nil)
	require.NoError(t, err)
	connect := func() *rdmacm.ID {
		ch := cmb.NewEventChannel()
		id, err := cmb.CreateID(ch, rdmacm.PortSpaceTCP)
		require.NoError(t, err)
		require.NoError(t, resolve(ctx, ch, id, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(p.Port))))
		_, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, id.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
		_, err = awaitCMEvent(ctx, ch, rdmacm.EventEstablished)
		require.NoError(t, err)
		return id
	}
	abandoned := connect()
	require.NoError(t, abandoned.Destroy())
	kept := []*rdmacm.ID{connect(), connect()}
	defer kept[0].Destroy()
	defer kept[1].Destroy()
	require.NoError(t, <-done)
	require.Len(t, r.qps, 2)
	require.Len(t, c.up, 2)
	for i, id := range c.up {
		assert.NotEqual(t, abandoned.LocalAddr(), id.PeerAddr(), "server connection %d is the abandoned one", i)
	}
}
