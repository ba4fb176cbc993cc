package capture_test

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/capture"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/verbs/verbstest"
)

// writePair is two devices on a memlink pair with connected RC QPs, A's
// source buffer and B's target region registered.
type writePair struct {
	a, b   *verbs.Device
	qa     *verbs.QP
	ca     *verbs.CQ
	src    *verbs.MR
	dst    *verbs.MR
	srcBuf []byte
}

func newWritePair(t *testing.T, size int) *writePair {
	addrA, addrB := netip.MustParseAddr("10.5.0.1"), netip.MustParseAddr("10.5.0.2")
	la, lb := memlink.Pair(memlink.Config{})
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{addrA}})
	require.NoError(t, err)
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{addrB}})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close(); la.Close(); lb.Close() })
	p := &writePair{a: a, b: b, srcBuf: bytes.Repeat([]byte{0xc5}, size)}
	mk := func(d *verbs.Device, buf []byte, access verbs.Access) (*verbs.QP, *verbs.CQ, *verbs.MR) {
		pd := d.AllocPD()
		cq, err := d.CreateCQ(64, nil)
		require.NoError(t, err)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1}})
		require.NoError(t, err)
		mr, err := pd.RegMR(buf, access)
		require.NoError(t, err)
		return qp, cq, mr
	}
	var qb *verbs.QP
	p.qa, p.ca, p.src = mk(a, p.srcBuf, 0)
	qb, _, p.dst = mk(b, make([]byte, size), ibv.AccessLocalWrite|ibv.AccessRemoteWrite)
	require.NoError(t, verbstest.ConnectRC(t, p.qa, qb, addrA, addrB, ibv.MTU1024))
	return p
}

// write does one signalled RDMA WRITE of the whole buffer and waits for it.
func (p *writePair) write(t *testing.T) {
	require.NoError(t, p.qa.PostSend(&ibv.SendWR{ID: 1, Opcode: ibv.WRRDMAWrite, Flags: ibv.SendSignaled,
		SGL:        []ibv.SGE{{Addr: p.src.Addr(), Length: uint32(len(p.srcBuf)), LKey: p.src.LKey()}},
		RemoteAddr: p.dst.Addr(), RKey: p.dst.RKey()}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]ibv.WC
	_, err := p.ca.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, ibv.WCSuccess, wc[0].Status)
}

// readCapture parses every frame of a pcap file: the IB opcodes and, per
// frame, whether it was sent by src.
func readCapture(t *testing.T, file []byte) (ops []header.Opcode, fromA []bool) {
	rd, err := pcapfile.NewReader(bytes.NewReader(file))
	require.NoError(t, err)
	for {
		pkt, err := rd.Next()
		if err == io.EOF {
			return ops, fromA
		}
		require.NoError(t, err)
		require.Equal(t, pkt.OrigLen, len(pkt.Data), "whole frames at the default snap length")
		var f roce.Frame
		require.NoError(t, roce.ParseFrame(pkt.Data, &f), "frame %d: encapsulation and ICRC", len(ops)+1)
		ops = append(ops, header.Opcode(f.IB[0]))
		fromA = append(fromA, f.Src == netip.MustParseAddr("10.5.0.1"))
	}
}

// TestCaptureBothDirections captures a 4 KiB RDMA WRITE at IB MTU 1024 on
// the sending device: its four WRITE frames as they left, with good ICRCs,
// and the ACK as it came in.
func TestCaptureBothDirections(t *testing.T) {
	p := newWritePair(t, 4096)
	var file bytes.Buffer
	c, err := capture.Start(p.a.RoCE(), capture.Config{W: &file})
	require.NoError(t, err)
	_, err = capture.Start(p.a.RoCE(), capture.Config{W: io.Discard})
	require.ErrorIs(t, err, capture.ErrRunning)
	p.write(t)
	// The ACK may reach the device's capture a little after the
	// completion: wait for it before stopping.
	require.Eventually(t, func() bool { return c.Stats().Written+c.Stats().Dropped >= 5 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Stop())
	require.Equal(t, capture.Stats{Written: 5}, c.Stats())
	ops, fromA := readCapture(t, file.Bytes())
	require.Equal(t, []header.Opcode{header.OpRCWriteFirst, header.OpRCWriteMiddle, header.OpRCWriteMiddle,
		header.OpRCWriteLast, header.OpRCAcknowledge}, ops)
	require.Equal(t, []bool{true, true, true, true, false}, fromA)

	// Stopped, the device captures nothing more, and may capture again.
	p.write(t)
	require.Equal(t, uint64(5), c.Stats().Written)
	var again bytes.Buffer
	c2, err := capture.Start(p.a.RoCE(), capture.Config{W: &again, Snaplen: 64})
	require.NoError(t, err)
	p.write(t)
	require.Eventually(t, func() bool { return c2.Stats().Written >= 5 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c2.Stop())
	rd, err := pcapfile.NewReader(&again)
	require.NoError(t, err)
	pkt, err := rd.Next()
	require.NoError(t, err)
	require.Len(t, pkt.Data, 64)
	require.Greater(t, pkt.OrigLen, 1024)
}

// TestCaptureIntoFile: into a regular file the frames go with direct I/O;
// the file, replaced from its start, holds the same frames
// as a capture through rings and ends with its last record; a file that
// cannot be mapped is written through the rings.
func TestCaptureIntoFile(t *testing.T) {
	p := newWritePair(t, 4096)
	path := filepath.Join(t.TempDir(), "c.pcap")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("old"), 100000), 0o644))
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer file.Close()
	before := time.Now()
	c, err := capture.Start(p.a.RoCE(), capture.Config{W: file})
	require.NoError(t, err)
	require.Equal(t, "direct", c.Out())
	p.write(t)
	require.Eventually(t, func() bool { return c.Stats().Written+c.Stats().Dropped >= 5 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Stop())
	after := time.Now()
	require.Equal(t, capture.Stats{Written: 5}, c.Stats())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	rd, err := pcapfile.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	for {
		pkt, err := rd.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.False(t, pkt.Timestamp.Before(before.Truncate(time.Microsecond)) || pkt.Timestamp.After(after), "%v not within [%v, %v]", pkt.Timestamp, before, after)
	}
	ops, fromA := readCapture(t, b)
	require.Equal(t, []header.Opcode{header.OpRCWriteFirst, header.OpRCWriteMiddle, header.OpRCWriteMiddle,
		header.OpRCWriteLast, header.OpRCAcknowledge}, ops)
	require.Equal(t, []bool{true, true, true, true, false}, fromA)
	// The file header, five record headers, WRITE FIRST (with its RETH),
	// two MIDDLE and LAST of 1024 bytes of payload, and the ACK; nothing
	// after them.
	require.Equal(t, 24+5*16+(1098+3*1082)+62, len(b))

	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	c, err = capture.Start(p.a.RoCE(), capture.Config{W: null})
	require.NoError(t, err)
	require.Equal(t, "rings", c.Out())
	p.write(t)
	require.Eventually(t, func() bool { return c.Stats().Written >= 5 }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Stop())
}

// TestCaptureStopsAtLimit: the file never passes the limit; the capture
// stops at the first frame that would pass it.
func TestCaptureStopsAtLimit(t *testing.T) {
	p := newWritePair(t, 16384)
	var file bytes.Buffer
	const limit = 5000 // the header and four frames of 1024 bytes of payload
	c, err := capture.Start(p.a.RoCE(), capture.Config{W: &file, Limit: limit})
	require.NoError(t, err)
	p.write(t)
	require.Eventually(t, func() bool { return c.Stats().Truncated }, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Stop())
	require.LessOrEqual(t, file.Len(), limit)
	ops, _ := readCapture(t, file.Bytes())
	require.Len(t, ops, 4)
	require.Equal(t, uint64(4), c.Stats().Written)
}

// failingWriter fails every write after the first n bytes.
type failingWriter struct{ n int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if len(b) > w.n {
		return 0, io.ErrShortWrite
	}
	w.n -= len(b)
	return len(b), nil
}

func TestCaptureReportsWriteError(t *testing.T) {
	p := newWritePair(t, 4096)
	c, err := capture.Start(p.a.RoCE(), capture.Config{W: &failingWriter{n: 100}})
	require.NoError(t, err)
	p.write(t)
	require.ErrorIs(t, c.Stop(), io.ErrShortWrite)
	_, err = capture.Start(p.a.RoCE(), capture.Config{W: &failingWriter{n: 10}})
	require.ErrorIs(t, err, io.ErrShortWrite, "the file header does not fit")
}
