package interop

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/test/interop/rxeguest"
	"github.com/softnic/softnic/verbs"
)

// The checks each side of testdata/aw_flush.c makes: the server with n
// requesters; the client on softnic (no ibv_wr_flush), and on rxe without
// its three FLUSHes and with them.
const (
	awServerBase    = 4
	awClientSoftnic = 4
	awClientRxe     = 5
	awClientFlushes = 3
)

func awServerChecks(n int) int { return awServerBase + n }

// TestInteropAtomicWriteFlush: IBTA 1.5's ATOMIC_WRITE and FLUSH between
// softnic and rdma_rxe in a Debian 13 guest (Linux 6.12, rdma-core 56),
// both ways, with testdata/aw_flush.c. First rxe responds: softnic's
// requester (aw_flush through softnic exec and the C provider) WRITEs 64
// bytes and ATOMIC_WRITEs the 8 after them (ibv_wr_atomic_write); a Go
// client of the daemon then FLUSHes (global visibility) a range and the
// whole region, which must succeed, and a region registered without
// IBV_ACCESS_FLUSH_GLOBAL, which must fail with a remote access error
// (softnic's provider, on rdma-core 44, has no ibv_wr_flush). rxe's
// aw_flush then finds the bytes in place. Then softnic responds and rxe's
// aw_flush requests all of it, its FLUSHes through rdma-core 56's
// ibv_wr_flush, the one of the region without FLUSH access refused.
//
// Linux 6.12's rxe computes a FLUSH's ICRC over its headers and then over
// those 32 bytes again (rxeFlushICRC), so the daemon runs with
// --rxe-flush-icrc: the capture must show every FLUSH frame of both sides
// with rxe's ICRC, and softnic must have taken each of rxe's
// (rx_flush_icrc_rxe) and dropped none for its ICRC. SOFTNIC_INTEROP_FLUSH_FRAME
// names a file to write the first of rxe's FLUSH frames to, in hex (as
// roce/testdata/rxe-flush.hex).
func TestInteropAtomicWriteFlush(t *testing.T) {
	requireInteropHost(t)
	requirePeerBuild(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e := prepareInterop(t, ctx, "snawf", interopPlan{}, rxeguest.Trixie)
	e.startDaemon("--rxe-flush-icrc")
	prog, data := buildPeerProgram(t, ctx, filepath.Dir(e.bin), "aw_flush")
	script := peerScript("aw_flush", "server", "/usr/bin/aw_flush", "server", "18810", "2") +
		peerScript("aw_flush", "client", "/usr/bin/aw_flush", "client", "10.77.0.1", "18811") + "echo '@@ all done'\n"
	g, err := rxeguest.Start(ctx, e.img, rxeguest.Config{Name: "snawf-peer", NetNS: e.net.BridgeNS, Tap: e.net.Taps[0],
		Addr: netip.MustParsePrefix("10.77.0.11/24"), Script: script, ScriptTimeout: 6 * time.Minute, MemoryMiB: 1024,
		Programs: map[string][]byte{"/usr/bin/aw_flush": data}})
	require.NoError(t, err)
	// Not in e.capDir: the FLUSH frames fail roce/testdata's ICRC check.
	capFile := filepath.Join(t.TempDir(), "softnic-rxe-atomic-write-flush.pcap")
	capture, err := e.net.Capture(ctx, "br0", capFile, "udp port 4791")
	require.NoError(t, err)

	// softnic requests of rxe: the C program (it retries until the
	// guest's server listens), then the Go FLUSHes.
	req, rerr := e.softnic(5*time.Minute, "exec", "--", prog, "client", "10.77.0.11", "18810")
	flushErr := goFlushes(t, e, "10.77.0.11:18810")
	// rxe requests of softnic.
	resp, perr := e.softnic(5*time.Minute, "exec", "--", prog, "server", "18811", "1")
	res, werr := g.Wait()
	require.NoError(t, capture.Stop())
	ctr := e.daemonCounters()
	require.NoError(t, werr)
	t.Logf("softnic requesting:\n%s\nsoftnic responding:\n%s\nguest (%v):\n%s", req, resp,
		res.Duration.Round(time.Second), res.Output)
	require.Zerof(t, res.ExitStatus, "guest script failed; console tail:\n%s", tailLines(res.Console, 40))
	sections := splitSections(res.Output)
	require.Contains(t, sections, "all done", "the guest finished its script")

	// ATOMIC_WRITE, both ways.
	require.NoError(t, rerr, "softnic's requester")
	require.NoError(t, perr, "softnic's responder")
	assert.Contains(t, req, "no FLUSH from this side", "softnic's provider has no ibv_wr_flush")
	checkPeerOutput(t, "softnic requesting", req, awClientSoftnic)
	checkPeerOutput(t, "rxe responding", sections["aw_flush server"], awServerChecks(2))
	checkPeerOutput(t, "softnic responding", resp, awServerChecks(1))

	// FLUSH, both ways, each side's frames with rxe's ICRC.
	ff, rxeFirst := flushFramesOf(t, capFile)
	t.Logf("FLUSH frames: %+v; softnic's rx_flush_icrc_rxe %d, rx_bad_icrc %d; rxe's first FLUSH frame: %x",
		ff, ctr["rx_flush_icrc_rxe"], ctr["rx_bad_icrc"], rxeFirst)
	saveFlushFrame(t, rxeFirst)
	require.NotZero(t, ff.softnic, "softnic sent its FLUSHes")
	require.Equal(t, ff.softnic, ff.softnicRxe, "every FLUSH frame of softnic's carries rxe's ICRC (--rxe-flush-icrc)")
	require.NotZero(t, ff.rxe, "rxe sent its FLUSHes")
	require.Equalf(t, ff.rxe, ff.rxeDoubled, "every FLUSH frame of rxe's carries rxe's ICRC (%s)", rxeFlushICRCWhy)
	assert.Equal(t, uint64(ff.rxe), ctr["rx_flush_icrc_rxe"], "softnic took each of rxe's FLUSH frames by rxe's ICRC")
	assert.Zero(t, ctr["rx_bad_icrc"], "softnic dropped no frame for its ICRC")
	require.NoError(t, flushErr, "softnic's Go FLUSHes")
	checkPeerOutput(t, "rxe requesting", sections["aw_flush client"], awClientRxe+awClientFlushes)
}

// saveFlushFrame writes frame, in hex, to $SOFTNIC_INTEROP_FLUSH_FRAME if
// that is set.
func saveFlushFrame(t *testing.T, frame []byte) {
	path := os.Getenv("SOFTNIC_INTEROP_FLUSH_FRAME")
	if path == "" || frame == nil {
		return
	}
	require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(frame)+"\n"), 0o644))
}

// rxeFlushICRCWhy is why Linux 6.12's rxe computes a FLUSH's ICRC as it
// does.
const rxeFlushICRCWhy = "rxe_opcode.c's IB_OPCODE_RC_FLUSH entry has no offset[RXE_PAYLOAD], so payload_addr() is " +
	"the BTH and payload_size() the 32 header bytes, which rxe_icrc.c hashes again after the headers"

// flushFrames counts the FLUSH frames of a capture by sender and ICRC:
// IBA's (Annex 17), or rxe's (rxeFlushICRC).
type flushFrames struct {
	softnic, softnicIBA, softnicRxe int
	rxe, rxeIBA, rxeDoubled         int
}

// flushFramesOf counts the FLUSH frames of capFile and returns the first
// of rxe's.
func flushFramesOf(t *testing.T, capFile string) (ff flushFrames, rxeFirst []byte) {
	frames, err := readPcap(capFile)
	require.NoError(t, err)
	for _, f := range frames {
		ip, bth, ok := flushOf(f)
		if !ok {
			continue
		}
		want, got, err := roceV2ICRC(f)
		require.NoError(t, err)
		if netip.AddrFrom4([4]byte(ip[12:16])) == softnicAddr {
			ff.softnic++
			switch got {
			case want:
				ff.softnicIBA++
			case rxeFlushICRC(ip, bth):
				ff.softnicRxe++
			}
			continue
		}
		ff.rxe++
		if rxeFirst == nil {
			rxeFirst = f
		}
		switch got {
		case want:
			ff.rxeIBA++
		case rxeFlushICRC(ip, bth):
			ff.rxeDoubled++
		}
	}
	return ff, rxeFirst
}

// flushOf returns an Ethernet/IPv4/UDP frame's IPv4 datagram and its IB
// transport headers (BTH on, without the ICRC) if it is an RC FLUSH
// (opcode 0x1c).
func flushOf(frame []byte) (ip, bth []byte, ok bool) {
	if len(frame) < 14+20+8+12+4 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return nil, nil, false
	}
	ip = frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if total > len(ip) || total < ihl+8+12+4 || ip[9] != 17 || binary.BigEndian.Uint16(ip[ihl+2:]) != 4791 {
		return nil, nil, false
	}
	ip = ip[:total]
	bth = ip[ihl+8 : total-4]
	return ip, bth, bth[0] == 0x1c
}

// rxeFlushICRC is the ICRC rxe gives a FLUSH: IBA's CRC over the masked
// headers, continued over the IB transport headers once more, unmasked.
func rxeFlushICRC(ip, bth []byte) uint32 {
	ihl := int(ip[0]&0x0f) * 4
	masked := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ip[:len(ip)-4]...)
	m := masked[8:]
	m[1], m[8], m[10], m[11] = 0xff, 0xff, 0xff, 0xff // TOS, TTL, header checksum
	m[ihl+6], m[ihl+7] = 0xff, 0xff                   // UDP checksum
	m[ihl+8+4] = 0xff                                 // BTH FECN, BECN, reserved
	return crc32.ChecksumIEEE(append(masked, bth...))
}

// errFlushUnanswered is a FLUSH that got no completion.
var errFlushUnanswered = errors.New("FLUSH not answered")

// goFlushes is aw_flush's requester side for FLUSH, as a Go client of the
// daemon: it takes one RC QP to the server at addr (aw_flush's lines),
// FLUSHes a range and all of region A, which must succeed, and a range of
// region B, which must fail with a remote access error, then says done.
func goFlushes(t *testing.T, e *interopEnv, addr string) error {
	socks, err := filepath.Glob(filepath.Join(e.runDir, "*.sock"))
	if err != nil || len(socks) != 1 {
		return fmt.Errorf("the daemon's socket under %s: %v %v", e.runDir, socks, err)
	}
	dev, err := client.DialDevice(socks[0])
	if err != nil {
		return err
	}
	defer dev.Close()
	conn, err := dialIn(e.net.PeerNS, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	lines := bufio.NewScanner(conn)
	next := func() (string, error) {
		if !lines.Scan() {
			return "", fmt.Errorf("the server hung up: %v", lines.Err())
		}
		return lines.Text(), nil
	}
	mrLine, err := next()
	if err != nil {
		return err
	}
	qpLine, err := next()
	if err != nil {
		return err
	}
	f, err := newGoFlusher(dev)
	if err != nil {
		return err
	}
	fmt.Fprintf(conn, "qp 0 %d %x\n", f.qp.QPN(), f.gid[:])
	if err := f.connect(qpLine); err != nil {
		return err
	}
	if l, err := next(); err != nil || l != "ready" {
		return fmt.Errorf("want ready, heard %q (%v)", l, err)
	}
	// done even after a failed FLUSH, so that the server goes on to its
	// checks of the region.
	ferr := f.flushes(t, mrLine)
	_, err = fmt.Fprintln(conn, "done")
	return errors.Join(ferr, err)
}

// goFlusher is one RC QP of a daemon's device.
type goFlusher struct {
	cq  *verbs.CQ
	qp  *verbs.QP
	gid verbs.GID
	sgi int
}

func newGoFlusher(dev *verbs.Device) (*goFlusher, error) {
	f := &goFlusher{sgi: -1}
	for i := range 16 {
		if g, err := dev.GID(i); err == nil && roce.IsIPv4GID(g) {
			f.gid, f.sgi = g, i
			break
		}
	}
	if f.sgi < 0 {
		return nil, fmt.Errorf("no IPv4 GID")
	}
	var err error
	if f.cq, err = dev.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	f.qp, err = dev.AllocPD().CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	return f, err
}

// connect takes the QP to RTS aimed at the server's "qp 0 QPN GID".
func (f *goFlusher) connect(qpLine string) error {
	var qpn uint32
	var hexGID string
	if _, err := fmt.Sscanf(qpLine, "qp 0 %d %s", &qpn, &hexGID); err != nil {
		return fmt.Errorf("%q: %w", qpLine, err)
	}
	b, err := hex.DecodeString(hexGID)
	if err != nil || len(b) != 16 {
		return fmt.Errorf("GID %q: %v", hexGID, err)
	}
	var dgid verbs.GID
	copy(dgid[:], b)
	q := f.qp
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1},
		verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex); err != nil {
		return err
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: qpn,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: verbs.AddressVector{DGID: dgid, SGIDIndex: uint8(f.sgi), HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return q.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
			verbs.QPAttrMaxQPRdAtomic)
}

// flushes FLUSHes the server's regions ("mr ADDR_A RKEY_A ADDR_B RKEY_B"),
// global visibility: a range of A and all of A succeed, a range of B
// (registered without FLUSH access) fails with a remote access error.
func (f *goFlusher) flushes(t *testing.T, mrLine string) error {
	fields := strings.Fields(mrLine)
	if len(fields) != 5 || fields[0] != "mr" {
		return fmt.Errorf("not an mr line: %q", mrLine)
	}
	var v [5]uint64
	for i := 1; i < 5; i++ {
		n, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return fmt.Errorf("%q: %w", mrLine, err)
		}
		v[i] = n
	}
	for _, c := range []struct {
		wr   verbs.SendWR
		want verbs.WCStatus
	}{
		{verbs.SendWR{ID: 1, RemoteAddr: v[1], RKey: uint32(v[2]), FlushLength: 72, FlushLevel: verbs.FlushRange}, verbs.WCSuccess},
		{verbs.SendWR{ID: 2, RemoteAddr: v[1], RKey: uint32(v[2]), FlushLevel: verbs.FlushMR}, verbs.WCSuccess},
		{verbs.SendWR{ID: 3, RemoteAddr: v[3], RKey: uint32(v[4]), FlushLength: 8, FlushLevel: verbs.FlushRange}, verbs.WCRemAccessErr},
	} {
		wr := c.wr
		wr.Opcode, wr.Flags, wr.FlushType = verbs.WRFlush, verbs.SendSignaled, verbs.FlushGlobal
		if err := f.qp.PostSend(&wr); err != nil {
			return err
		}
		// 20 s, as aw_flush's requester: an unanswered FLUSH fails soon.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wc [1]verbs.WC
		n, err := f.cq.Wait(ctx, wc[:])
		cancel()
		if err != nil || n != 1 {
			return fmt.Errorf("FLUSH %d: %w in 20 s (%v)", wr.ID, errFlushUnanswered, err)
		}
		t.Logf("softnic's Go FLUSH %d (level %v): %v, opcode %v", wr.ID, wr.FlushLevel, wc[0].Status, wc[0].Opcode)
		if wc[0].Status != c.want || wc[0].WRID != wr.ID || (c.want == verbs.WCSuccess && wc[0].Opcode != verbs.WCFlush) {
			return fmt.Errorf("FLUSH %d: status %v opcode %v, want %v", wr.ID, wc[0].Status, wc[0].Opcode, c.want)
		}
	}
	return nil
}
