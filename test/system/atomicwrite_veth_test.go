package system

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// TestProviderAtomicWriteFlush: IBTA 1.5's ATOMIC_WRITE and FLUSH between
// two daemons. testdata/atomic_write.c serves a region (remote write and
// FLUSH_GLOBAL) and two QPs on B's daemon as user nobody; the same program
// on A's daemon, as nobody too, WRITEs 64 bytes into it and ATOMIC_WRITEs
// the word after them through ibv_wr_atomic_write, then an unaligned word,
// which B NAKs; a Go client of A's daemon FLUSHes a range and the whole
// region (rdma-core 44's libibverbs has no ibv_wr_flush, so no C program
// on this host can) and a region without FLUSH access, which B NAKs with
// a remote access error. The server then finds the bytes in place.
//
// Against a Linux rxe peer (the lead's interop guest), the same program
// runs unchanged: build it there with `cc -O1 -o atomic_write
// atomic_write.c -libverbs` (checks.h beside it) and run `atomic_write
// server 1` on one side and `atomic_write client` under `softnic exec` on
// the other: give the server the client's "qp 0 QPN GID" as "peer 0 QPN
// GID"; once it says "ready", give the client the server's "mr ..." line
// and its "qp 0 QPN GID" as "peer 0 QPN GID"; when the client has ended,
// any line on the server's stdin makes it check the region. Either role
// may be the rxe side.
func TestProviderAtomicWriteFlush(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "atomic_write")
	srv := startCProgram(t, w.command(ctx, w.b, prog, "server", "2"))
	mrLine := srv.waitForPrefix(t, "mr ")
	qp0 := strings.TrimPrefix(srv.waitForPrefix(t, "qp 0 "), "qp 0 ")
	qp1 := strings.TrimPrefix(srv.waitForPrefix(t, "qp 1 "), "qp 1 ")

	cli := startCProgram(t, w.command(ctx, w.a, prog, "client"))
	cliQP := strings.TrimPrefix(cli.waitForPrefix(t, "qp 0 "), "qp 0 ")
	f := newFlusher(t, w.daemons[0].Sock)
	// The server's QPs reach RTS before the client sends: its unaligned
	// ATOMIC_WRITE takes the server's QP to ERR, which would fail the
	// server's move from RTR to RTS if it came first.
	fmt.Fprintf(srv.stdin, "peer 0 %s\npeer 1 %s\n", cliQP, f.line())
	srv.waitFor(t, "ready")
	fmt.Fprintf(cli.stdin, "%s\npeer 0 %s\n", mrLine, qp0)
	f.connect(t, qp1)
	cli.finish(t, 7)
	f.flushes(t, mrLine)
	fmt.Fprintln(srv.stdin, "check")
	srv.finish(t, 6)
	f.close()
	w.stop(t)
}

// flusher is a Go client of a daemon with one RC QP, which FLUSHes.
type flusher struct {
	dev *verbs.Device
	cq  *verbs.CQ
	qp  *verbs.QP
	gid verbs.GID
	sgi int
}

func newFlusher(t *testing.T, sock string) *flusher {
	dev, err := client.DialDevice(sock)
	require.NoError(t, err)
	f := &flusher{dev: dev, sgi: -1}
	for i := range 16 {
		if g, err := dev.GID(i); err == nil && roce.IsIPv4GID(g) {
			f.gid, f.sgi = g, i
			break
		}
	}
	require.GreaterOrEqual(t, f.sgi, 0, "an IPv4 GID")
	f.cq, err = dev.CreateCQ(16, nil)
	require.NoError(t, err)
	f.qp, err = dev.AllocPD().CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return f
}

func (f *flusher) line() string { return fmt.Sprintf("%d %x", f.qp.QPN(), f.gid[:]) }

// connect takes the QP to RTS aimed at "QPN GID".
func (f *flusher) connect(t *testing.T, peer string) {
	var qpn uint32
	var hexGID string
	_, err := fmt.Sscanf(peer, "%d %s", &qpn, &hexGID)
	require.NoError(t, err)
	b, err := hex.DecodeString(hexGID)
	require.NoError(t, err)
	var dgid verbs.GID
	copy(dgid[:], b)
	q := f.qp
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1},
		verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: qpn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: dgid, SGIDIndex: uint8(f.sgi), HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic))
}

// flushes FLUSHes the server's region ("mr ADDR RKEY ADDR2 RKEY2"): a
// range and the whole region succeed; the region without FLUSH access
// is refused.
func (f *flusher) flushes(t *testing.T, mrLine string) {
	fields := strings.Fields(mrLine)
	require.Len(t, fields, 5)
	num := func(i int) uint64 {
		v, err := strconv.ParseUint(fields[i], 10, 64)
		require.NoError(t, err)
		return v
	}
	addr, rkey, addr2, rkey2 := num(1), uint32(num(2)), num(3), uint32(num(4))
	for _, wr := range []verbs.SendWR{
		{ID: 1, RemoteAddr: addr, RKey: rkey, FlushLength: 72, FlushLevel: verbs.FlushRange},
		{ID: 2, RemoteAddr: addr, RKey: rkey, FlushLevel: verbs.FlushMR},
		{ID: 3, RemoteAddr: addr2, RKey: rkey2, FlushLength: 8, FlushLevel: verbs.FlushRange},
	} {
		wr.Opcode, wr.Flags, wr.FlushType = verbs.WRFlush, verbs.SendSignaled, verbs.FlushGlobal
		require.NoError(t, f.qp.PostSend(&wr))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wc [1]verbs.WC
		n, err := f.cq.Wait(ctx, wc[:])
		cancel()
		require.NoError(t, err)
		require.Equal(t, 1, n)
		want := verbs.WCSuccess
		if wr.ID == 3 {
			want = verbs.WCRemAccessErr
		}
		require.Equal(t, want, wc[0].Status, "FLUSH %d", wr.ID)
		require.Equal(t, verbs.WCFlush, wc[0].Opcode)
	}
}

func (f *flusher) close() { f.dev.Close() }
