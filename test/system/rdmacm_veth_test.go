package system

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/internal/netnstest"
)

// rdmacmTools are Debian's programs that link librdmacm, which softnic's
// replacement (provider/rdmacm.h) carries through the daemons.
var rdmacmTools = []string{"rping", "ucmatose", "udaddy", "rdma_server", "rdma_client"}

// cmPair runs a stock rdma_cm server on end A and its client on end B,
// with "ADDR" in the client's arguments replaced by A's IPv4 address, and
// returns both outputs; both must succeed. An rdma_cm server has no TCP
// port to wait for, so the client starts once the server's daemon counts
// a listening ID of the server's session (softnic stat res -d's
// cm_listen): a client that found nobody listening would be rejected,
// and with -c 2 its second REQ could reach the listener after it gave up.
//
// perftest's server listens a second time, for the test's connections,
// after the first one's accept: a client whose REQ comes first is
// rejected (invalid service ID, reason 8) and Debian's perftest gives up
// where upstream's now retries the connection. And perftest times the
// CPU's cycle counter against the clock before it reports; on a loaded
// host the fit can fail (r^2 < 0.9), and the tool exits without a report
// after a transfer that worked. Such a pair is run again, up to three
// times in all.
func (w *providerWorld) cmPair(t *testing.T, server, client []string) (string, string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := w.cmAttempt(t, server, client)
		if r.cerr != nil && attempt < 3 && perftestEarlyREQ.MatchString(r.cout) {
			t.Logf("%v: the client's REQ came before the server's second listen; again:\n%s", client, r.cout)
			continue
		}
		if r.againForClock(t, attempt, client) {
			continue
		}
		if r.cerr != nil && client[0] == "rping" && rpingExitRace(r.cout) {
			t.Logf("%v: rping failed on its exit race (rdma-core before 61), its pings are checked apart:\n%s", client, r.cout)
			r.cerr = nil
		}
		if r.serr != nil && server[0] == "rping" && rpingExitRace(r.sout) {
			t.Logf("%v: rping failed on its exit race (rdma-core before 61):\n%s", server, r.sout)
			r.serr = nil
		}
		require.NoError(t, r.cerr, "%v: client:\n%s\nserver %v:\n%s", client, r.cout, r.serr, r.sout)
		require.NoError(t, r.serr, "%v: server:\n%s\nclient:\n%s", server, r.sout, r.cout)
		return r.sout, r.cout
	}
}

// withAddrs is argv with "ADDR6" replaced by A's IPv6 address and "ADDR"
// by its IPv4 one.
func (w *providerWorld) withAddrs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		a = strings.ReplaceAll(a, "ADDR6", w.a.Addr6().String())
		out[i] = strings.ReplaceAll(a, "ADDR", w.a.Addr4().String())
	}
	return out
}

// perftestEarlyREQ is how perftest reports a REJ for invalid service ID.
var perftestEarlyREQ = regexp.MustCompile(`Event: RDMA_CM_EVENT_REJECTED; error: 8\.`)

// againForClock reports whether the pair of client that ended as r is to
// be run again because perftest could not time its cycle counter
// (perftestNoClock), attempt being the run's number (of three at most);
// it logs why.
func (r pairRun) againForClock(t *testing.T, attempt int, client []string) bool {
	if (r.serr == nil && r.cerr == nil) || attempt >= 3 || !perftestNoClock(r) {
		return false
	}
	t.Logf("%v: perftest could not time its cycle counter; again:\nserver:\n%s\nclient:\n%s", client, r.sout, r.cout)
	return true
}

// perftestNoClock reports whether a side of r failed perftest's timing of
// its cycle counter, which ends it with "Can't produce a report".
func perftestNoClock(r pairRun) bool {
	for _, out := range []string{r.sout, r.cout} {
		if perftestClockFit.MatchString(out) && strings.Contains(out, "Can't produce a report") {
			return true
		}
	}
	return false
}

var perftestClockFit = regexp.MustCompile(`Correlation coefficient r\^2: [0-9.e+-]+ < 0\.9`)

// rpingExitRace reports whether rping failed only because its CM event
// thread read the event channel after the main thread, done, had
// destroyed it: it prints the read's error (on stderr, so anywhere in the
// buffered stdout's pings) and exits with 255 after a run that worked; the
// callers count the pings. rdma-core fixed it in 61.0 (f3ae6534a, "rping:
// terminate CM event thread before exiting"); Debian 12 has 44.
func rpingExitRace(out string) bool {
	return strings.Contains(out, "rdma_get_cm_event: Bad file descriptor")
}

// pairRun is how one run of a server and its client ended.
type pairRun struct {
	sout, cout string
	serr, cerr error
}

// cmAttempt runs server, then client once the server listens. A server
// left waiting by a client that failed is killed.
func (w *providerWorld) cmAttempt(t *testing.T, server, client []string) pairRun {
	t.Helper()
	limit := w.pairLimit
	if limit == 0 {
		limit = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	sock := filepath.Join(w.runDir, "softnic_"+w.a.Ifname+".sock")
	before, err := listeners(sock, 0)
	require.NoError(t, err)
	srv := w.command(ctx, w.a, w.withAddrs(server)...)
	srv.WaitDelay = 5 * time.Second
	sout, exited := startWatched(t, srv)
	if err := awaitListener(ctx, sock, before.last, exited); err != nil {
		srv.Process.Kill()
		require.Failf(t, "no listener", "%v: %v\n%s", server, err, sout.String())
	}
	cli := w.command(ctx, w.b, w.withAddrs(client)...)
	cli.WaitDelay = 5 * time.Second
	cout, cerr := cli.CombinedOutput()
	wait := ctx
	if cerr != nil {
		// A failed client's server ends soon, or waits for good.
		var stop context.CancelFunc
		wait, stop = context.WithTimeout(ctx, 5*time.Second)
		defer stop()
	}
	var serr error
	select {
	case serr = <-exited:
	case <-wait.Done():
		srv.Process.Kill()
		serr = <-exited
	}
	return pairRun{sout: sout.String(), cout: string(cout), serr: serr, cerr: cerr}
}

// awaitListener waits until the daemon at sock has a session after
// session ID after with a listening rdma_cm ID. exited says the server
// ended first.
func awaitListener(ctx context.Context, sock string, after uint32, exited chan error) error {
	for {
		if l, err := listeners(sock, after); err != nil {
			return err
		} else if l.listening > 0 {
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("server ended before it listened: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// listenerCount is what a daemon's sessions after some ID hold: how many
// rdma_cm IDs listen, and the last session's ID.
type listenerCount struct {
	listening int
	last      uint32
}

// listeners asks the daemon at sock for its sessions after session ID
// after (softnic stat res -d's cm_listen).
func listeners(sock string, after uint32) (listenerCount, error) {
	m, err := session.DialMonitor(sock)
	if err != nil {
		return listenerCount{}, err
	}
	defer m.Close()
	res, err := m.Resources()
	l := listenerCount{last: after}
	for _, s := range res.Session {
		if s.ID > after {
			l.listening += int(s.Listening)
			l.last = max(l.last, s.ID)
		}
	}
	return l, err
}

// rpingData is the start of a ping rping -v prints, with its number (its
// cm thread's messages may land within the line).
var rpingData = regexp.MustCompile(`ping data: rdma-ping-(\d+): `)

// rpingCount is how many distinct pings out shows.
func rpingCount(out string) int {
	seen := map[string]bool{}
	for _, m := range rpingData.FindAllStringSubmatch(out, -1) {
		seen[m[1]] = true
	}
	return len(seen)
}

// TestStockRDMACMThroughProvider runs Debian's unmodified librdmacm
// programs (rping, ucmatose, udaddy, rdma_server and rdma_client,
// perftest with -R, qperf with -cm1) between two daemons in two namespaces, as user nobody, through
// softnic's librdmacm.so.1 and the provider.
func TestStockRDMACMThroughProvider(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install rdmacm-utils", rdmacmTools...)
	w := newProviderWorld(t)
	t.Run("misuse", w.testCMMisuse)
	t.Run("rping", func(t *testing.T) {
		_, cout := w.cmPair(t, []string{"rping", "-s", "-C", "100"},
			[]string{"rping", "-c", "-a", "ADDR", "-v", "-V", "-C", "100"})
		assert.Equal(t, 100, rpingCount(cout), "verified pings:\n%s", cout)
	})
	// -q: each side makes its QP with ibv_create_qp and moves it itself
	// with rdma_init_qp_attr; the client ends the exchange with
	// rdma_establish after RDMA_CM_EVENT_CONNECT_RESPONSE.
	t.Run("rping -q", func(t *testing.T) {
		_, cout := w.cmPair(t, []string{"rping", "-s", "-q", "-C", "50"},
			[]string{"rping", "-c", "-q", "-a", "ADDR", "-v", "-V", "-C", "50"})
		assert.Equal(t, 50, rpingCount(cout), "verified pings:\n%s", cout)
	})
	t.Run("ucmatose", func(t *testing.T) {
		sout, cout := w.cmPair(t, []string{"ucmatose"}, []string{"ucmatose", "-s", "ADDR"})
		for _, out := range []string{sout, cout} {
			assert.Contains(t, out, "data transfers complete", "a side did not finish")
			assert.NotContains(t, out, "failed")
		}
	})
	// -m: both sides move their IDs to a new channel (rdma_migrate_id)
	// after the transfers, and take the disconnect's events there.
	t.Run("ucmatose -m", func(t *testing.T) {
		sout, cout := w.cmPair(t, []string{"ucmatose", "-m", "-c", "2"}, []string{"ucmatose", "-m", "-c", "2", "-s", "ADDR"})
		for _, out := range []string{sout, cout} {
			assert.Contains(t, out, "data transfers complete", "a side did not finish")
			assert.Contains(t, out, "migrating to new event channel")
			assert.Contains(t, out, "test complete")
			assert.NotContains(t, out, "fail")
		}
	})
	// UD QPs, the peer's resolved with SIDR; the server answers each
	// datagram to the address it came from (ibv_create_ah_from_wc).
	t.Run("udaddy", func(t *testing.T) {
		sout, cout := w.cmPair(t, []string{"udaddy"}, []string{"udaddy", "-s", "ADDR"})
		for _, out := range []string{sout, cout} {
			assert.Contains(t, out, "data transfers complete", "a side did not finish")
			assert.Contains(t, out, "test complete")
			assert.NotContains(t, out, "fail")
		}
	})
	t.Run("rdma_server", func(t *testing.T) {
		sout, cout := w.cmPair(t, []string{"rdma_server"}, []string{"rdma_client", "-s", "ADDR"})
		assert.Contains(t, sout, "rdma_server: end 0")
		assert.Contains(t, cout, "rdma_client: end 0")
	})
	for _, tool := range []string{"ib_send_bw", "ib_write_bw", "ib_read_bw"} {
		t.Run(tool+" -R", func(t *testing.T) {
			args := []string{tool, "-R", "-x", "1", "-n", "500"}
			sout, cout := w.cmPair(t, args, append(args, "ADDR"))
			for _, out := range []string{sout, cout} {
				require.Greater(t, perftestLast(t, out, 65536), 0.0, "no figure:\n%s", out)
			}
		})
	}
	// rdma_set_option: an ACK timeout and a traffic class (cm_set_option).
	t.Run("ib_send_bw -R -u 18 -T 32", func(t *testing.T) {
		args := []string{"ib_send_bw", "-R", "-u", "18", "-T", "32", "-x", "1", "-n", "200"}
		sout, cout := w.cmPair(t, args, append(args, "ADDR"))
		for _, out := range []string{sout, cout} {
			require.Greater(t, perftestLast(t, out, 65536), 0.0, "no figure:\n%s", out)
		}
	})
	t.Run("ib_write_lat -R", func(t *testing.T) {
		args := []string{"ib_write_lat", "-R", "-x", "1", "-n", "200"}
		_, cout := w.cmPair(t, args, append(args, "ADDR"))
		require.Greater(t, perftestLast(t, cout, 2), 0.0, "no figure:\n%s", cout)
	})
	t.Run("qperf -cm1", w.testQperf)
	w.stopUnderServer(t)
}

// qperfTests are qperf's RC tests, each of which prints its figure as
// "NAME:" then "    key  =  value unit". (qperf's UC tests and its UD
// tests' server set up addresses without a GRH, which RoCE refuses, on
// ConnectX and rdma_rxe as here.)
var qperfTests = []string{"rc_bw", "rc_bi_bw", "rc_lat", "rc_rdma_write_bw", "rc_rdma_write_lat",
	"rc_rdma_read_bw", "rc_rdma_read_lat", "rc_compare_swap_mr", "rc_fetch_add_mr"}

// testQperf runs Debian's qperf (control over TCP, QPs connected by
// rdma_cm with -cm1), its RC tests for a second each (-t takes whole
// seconds: 0.5 runs for good), then tells the server to quit.
func (w *providerWorld) testQperf(t *testing.T) {
	netnstest.RequireCommands(t, "apt-get install qperf", "qperf")
	script := `qperf -cm1 -t 1 "$0" ` + strings.Join(qperfTests, " ") + ` && qperf "$0" quit`
	_, cout := w.pair(t, 19765, []string{"qperf"}, []string{"sh", "-c", script})
	for _, test := range qperfTests {
		assert.Regexp(t, `(?m)^`+test+`:\n\s+\w+\s+=\s+[0-9.]+ \S+`, cout, "no figure for %s", test)
	}
	assert.NotContains(t, cout, "failed")
}

// stopUnderServer stops the daemons while an rping server waits for a
// connection in rdma_get_cm_event: the channel's pipe closes, the next
// command fails, and rping exits with an error rather than hang.
func (w *providerWorld) stopUnderServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := strings.Count(w.logs[0].String(), "session started")
	srv := w.command(ctx, w.a, "rping", "-s", "-a", w.a.Addr4().String())
	srv.WaitDelay = 5 * time.Second
	out, exited := startWatched(t, srv)
	require.Eventually(t, func() bool { return strings.Count(w.logs[0].String(), "session started") > started },
		30*time.Second, 20*time.Millisecond, "rping's session never started:\n%s", out.String())
	w.stop(t)
	err := <-exited
	require.NoError(t, ctx.Err(), "rping did not exit once the daemon stopped:\n%s", out.String())
	require.Error(t, err, "rping's server ended well with no daemon:\n%s", out.String())
	t.Logf("rping -s, its daemon stopped: %v\n%s", err, out.String())
}

// testCMMisuse runs testdata/cm_misuse.c, a program that calls librdmacm
// out of order and asks for what softnic does not do: each call must fail
// with librdmacm's errno (EINVAL, EADDRNOTAVAIL, EADDRINUSE, ENOSYS, EOPNOTSUPP,
// EAGAIN) while an ACK timeout and a traffic class are taken, and the
// daemon must serve the next program (the subtests after this one).
func (w *providerWorld) testCMMisuse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bin := filepath.Join(systest.RootDir(t), "cm_misuse")
	out, err := exec.CommandContext(ctx, "cc", "-Wall", "-Wextra", "-Werror", "-o", bin, filepath.Join("testdata", "cm_misuse.c"),
		"-lrdmacm", "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	out, err = w.command(ctx, w.a, bin, w.a.Addr4().String()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "all checks passed")
	assert.Len(t, regexp.MustCompile(`(?m)^ok `).FindAllString(string(out), -1), 29, "checks that ran:\n%s", out)
}

// TestPerftestNoClock checks the retry's condition against the output of a
// perftest server that could not time its cycle counter (seen in CI), and
// that a failed transfer alone does not match.
func TestPerftestNoClock(t *testing.T) {
	noClock := "Correlation coefficient r^2: 0.769105 < 0.9\nCan't produce a report\n\n*****\n"
	require.True(t, perftestNoClock(pairRun{sout: noClock}))
	require.True(t, perftestNoClock(pairRun{cout: noClock}))
	require.False(t, perftestNoClock(pairRun{sout: "Correlation coefficient r^2: 0.769105 < 0.9\n 65536 500 360.19 359.70\n"}))
	require.False(t, perftestNoClock(pairRun{cout: "Bad wc status -- 5 -- 5\nCan't produce a report\n"}))
}

// TestRpingExitRace checks that only rping's read of its destroyed event
// channel counts as the exit race.
func TestRpingExitRace(t *testing.T) {
	pings := "ping data: rdma-ping-98: ABCDEF\nping data: rdma-ping-99: BCDEFG\n"
	require.True(t, rpingExitRace("ping data: rdma-ping-98: ABrdma_get_cm_event: Bad file descriptor\nCDEF\n"+pings))
	require.False(t, rpingExitRace(pings+"rdma_get_cm_event: Connection reset by peer\n"))
}
