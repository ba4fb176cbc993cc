package rping

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// handMadePair connects a server and a client session by hand.
func handMadePair(t *testing.T, scfg, ccfg Config) (srv, cli *side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	da, db := memDevices(t)
	scfg.Server = true
	srv, cli = newSide(t, ctx, da, scfg), newSide(t, ctx, db, ccfg)
	connectByHand(t, srv, cli)
	return srv, cli
}

// TestServerBogusMessage: a peer's SEND of 8 bytes instead of rping's 16
// ends the server's loop with rping's complaints, not a panic.
func TestServerBogusMessage(t *testing.T) {
	srv, cli := handMadePair(t, Config{Size: DefaultSize}, Config{Size: DefaultSize})
	cli.s.sendSGL[0].Length = 8
	require.NoError(t, cli.s.qp.PostSend(&cli.s.sendWR))
	err := srv.s.testServer()
	assert.Error(t, err)
	assert.Equal(t, "Received bogus data, size 8\nrecv wc error: -1\nwait for RDMA_READ_ADV state 11\n", srv.stderr.String())
}

// TestServerBadRKey: an advertisement with a key the client never
// registered makes the server's READ fail at the client (a NAK): an error
// completion and the loop's complaint.
func TestServerBadRKey(t *testing.T) {
	srv, cli := handMadePair(t, Config{Size: DefaultSize}, Config{Size: DefaultSize})
	rdmaInfo{addr: cli.s.startMR.Addr(), rkey: cli.s.startMR.RKey() ^ 0x5a5a, size: DefaultSize}.put(cli.s.sendBuf)
	require.NoError(t, cli.s.qp.PostSend(&cli.s.sendWR))
	assert.Error(t, srv.s.testServer())
	assert.Regexp(t, `^cq completion failed status \d+\nwait for RDMA_READ_COMPLETE state 11\n$`, srv.stderr.String())
}

// corruptingServer is rping's server loop for one ping, except that it
// changes a byte of the data between its READ and its WRITE.
func corruptingServer(t *testing.T, s *session) {
	require.NoError(t, s.expect(stateRDMAReadAdv, "RDMA_READ_ADV"))
	s.setRDMA(verbs.WRRDMARead, s.remote.size)
	require.NoError(t, s.post(&s.rdmaWR))
	require.NoError(t, s.expect(stateRDMAReadComplete, "RDMA_READ_COMPLETE"))
	s.rdmaBuf[20] ^= 1
	require.NoError(t, s.goAhead())
	require.NoError(t, s.expect(stateRDMAWriteAdv, "RDMA_WRITE_ADV"))
	s.setRDMA(verbs.WRRDMAWrite, uint32(s.echoLen()))
	require.NoError(t, s.post(&s.rdmaWR))
	require.NoError(t, s.expect(stateRDMAWriteComplete, "RDMA_WRITE_COMPLETE"))
	require.NoError(t, s.goAhead())
}

// TestClientDataMismatch: with -V the client catches data that came back
// changed, says "data mismatch!" and fails, printing no -v line for it.
func TestClientDataMismatch(t *testing.T) {
	srv, cli := handMadePair(t, Config{Size: DefaultSize}, Config{Size: DefaultSize, Count: 3, Validate: true, Verbose: true})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		corruptingServer(t, srv.s)
	}()
	err := cli.s.testClient()
	wg.Wait()
	assert.Error(t, err)
	assert.Equal(t, "data mismatch!\n", cli.stderr.String())
	assert.Empty(t, cli.stdout.String())
}

// TestRunForeverInterrupted: a client without -C pings until its run is
// stopped (a signal): status 130, and the server ends on its disconnect.
func TestRunForeverInterrupted(t *testing.T) {
	scm, ccm := cmPair(t)
	waitServer := start(context.Background(), scm, serverConfig())
	waitListening(t, scm)
	ctx, stop := context.WithCancel(context.Background())
	ccfg := clientConfig()
	ccfg.Verbose = true
	o := &outcome{}
	waitClient := startInto(ctx, ccm, ccfg, o)
	// Stopped after ten pings, however long they took.
	require.Eventually(t, func() bool { return strings.Count(o.stdout.String(), "ping data: rdma-ping-") >= 10 },
		time.Minute, time.Millisecond, "pings before the interrupt")
	stop()
	cli, srv := waitClient(), waitServer()
	assert.Equal(t, 130, ExitStatus(cli.err), "%v", cli)
	assert.NoError(t, srv.err, "%v", srv)
	// The disconnect finds the server at whichever step of a ping.
	assert.Regexp(t, `^server DISCONNECT EVENT...\nwait for RDMA_[A-Z_]+ state 10\n$`, srv.stderr.String())
}

// TestAcceptParam: without -q the server answers with the request's
// resources turned to its side and capped by the device, as librdmacm's
// rdma_accept(id, NULL); with -q with rping's own.
func TestAcceptParam(t *testing.T) {
	req := rdmacm.ConnParam{ResponderResources: 4, InitiatorDepth: 200}
	assert.Equal(t, &rdmacm.ConnParam{ResponderResources: 16, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7},
		acceptParam(&Config{}, req, 16))
	assert.Equal(t, connParam(), acceptParam(&Config{SelfCreateQP: true}, req, 16))
	assert.Equal(t, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}, connParam())
}

// TestClientResult: a failed loop fails the client even though the
// disconnect it asks for afterwards is confirmed; an error event wins.
func TestClientResult(t *testing.T) {
	assert.NoError(t, clientResult(nil, nil))
	assert.Equal(t, 255, ExitStatus(clientResult(errors.New("rping: data mismatch"), nil)))
	assert.Equal(t, 130, ExitStatus(clientResult(context.Canceled, nil)))
	fatal := failed("rping: RDMA_CM_EVENT_CONNECT_ERROR")
	assert.Equal(t, fatal, clientResult(context.Canceled, fatal))
}
