package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
)

func init() {
	register("inspect", "decode the RoCEv2 frames of a pcap/pcapng file and verify their ICRC", runInspect)
}

// Exit statuses of inspect.
const (
	inspectAllGood  = 0
	inspectSomeBad  = 1
	inspectBadInput = 2
)

func runInspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic inspect FILE.pcap|FILE.pcapng")
		fmt.Fprintln(stderr, "\nPrints one line per RoCEv2 frame and verifies each ICRC. CM MADs on QP1 are")
		fmt.Fprintln(stderr, "decoded: the message, communication IDs, service ID and rdma_cm addresses.")
		fmt.Fprintln(stderr, "Exit status: 0 every frame good, 1 a frame bad (ICRC, headers or MAD), 2 unreadable input.")
	}
	if err := fs.Parse(args); err != nil {
		return helpStatus(err, inspectBadInput)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return inspectBadInput
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "softnic inspect: %v\n", err)
		return inspectBadInput
	}
	defer f.Close()
	sum, err := inspect(f, stdout)
	cutShort := errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !cutShort {
		fmt.Fprintf(stderr, "softnic inspect: %s: %v\n", fs.Arg(0), err)
		return inspectBadInput
	}
	fmt.Fprintf(stdout, "%d frames: %d RoCEv2 (%d good, %d bad), %d other\n",
		sum.Frames, sum.RoCE, sum.Good, sum.Bad, sum.Other)
	if cutShort {
		// What a capture killed while it wrote leaves, as tshark says.
		fmt.Fprintf(stderr, "softnic inspect: %s: cut short in the middle of a frame after the frames above (%v)\n", fs.Arg(0), err)
		return inspectBadInput
	}
	if sum.Bad > 0 {
		return inspectSomeBad
	}
	return inspectAllGood
}

// inspectSummary counts what inspect saw.
type inspectSummary struct {
	Frames, RoCE, Good, Bad, Other int
}

// inspect prints one line per RoCEv2 frame read from r. It returns an error
// only when r is not a readable capture; bad frames are reported in the
// output and counted in the summary.
func inspect(r io.Reader, w io.Writer) (inspectSummary, error) {
	var sum inspectSummary
	rd, err := pcapfile.NewReader(r)
	if err != nil {
		return sum, err
	}
	var line strings.Builder
	for {
		pkt, err := rd.Next()
		if err == io.EOF {
			return sum, nil
		}
		if err != nil {
			return sum, err
		}
		sum.Frames++
		if pkt.LinkType != pcapfile.LinkTypeEthernet {
			sum.Other++
			continue
		}
		line.Reset()
		fmt.Fprintf(&line, "%5d ", sum.Frames)
		good, isRoCE := describeFrame(&line, pkt.Data, pkt.OrigLen)
		if !isRoCE {
			sum.Other++
			continue
		}
		sum.RoCE++
		if good {
			sum.Good++
		} else {
			sum.Bad++
		}
		line.WriteByte('\n')
		if _, err := io.WriteString(w, line.String()); err != nil {
			return sum, fmt.Errorf("writing output: %w", err)
		}
	}
}

// describeFrame writes a one-line description of an Ethernet frame. It
// reports whether the frame is a RoCEv2 frame and whether it is good.
func describeFrame(w *strings.Builder, data []byte, origLen int) (good, isRoCE bool) {
	var f roce.Frame
	err := roce.ParseFrame(data, &f)
	if errors.Is(err, roce.ErrNotRoCE) {
		return false, false
	}
	if len(data) < origLen {
		// A snap length cut the frame: its ICRC cannot be checked.
		fmt.Fprintf(w, "truncated by the capture (%d of %d bytes): ICRC not verifiable  BAD", len(data), origLen)
		return false, true
	}
	if f.IB == nil {
		fmt.Fprintf(w, "malformed RoCEv2 frame: %v  BAD", err)
		return false, true
	}
	fmt.Fprintf(w, "%s:%d > %s ", f.Src, f.SrcPort, f.Dst)
	var p header.Packet
	perr := header.ParsePacket(f.IB, &p)
	if p.BTH != nil {
		describePacket(w, &p)
	} else if len(f.IB) >= header.BTHLen {
		fmt.Fprintf(w, "%v ", header.BTH(f.IB).Opcode())
	}
	if perr != nil {
		fmt.Fprintf(w, "[%v] ", perr)
	}
	var merr error
	if perr == nil && mad.ToGSI(&p) {
		merr = describeMAD(w, p.Payload)
	}
	switch {
	case errors.Is(err, roce.ErrBadICRC):
		pkt := data[f.IPOffset : f.IPOffset+ipPayloadEnd(&f)]
		fmt.Fprintf(w, "icrc=%08x BAD (expected %08x", f.ICRC, roce.ICRC(pkt))
		if header.Opcode(f.IB[0]) == header.OpRCFlush && roce.RxeFlushICRC(pkt) == f.ICRC {
			// Not IBA's, but what Linux rxe sends (--rxe-flush-icrc).
			w.WriteString("; rdma_rxe's FLUSH ICRC")
		}
		w.WriteString(")")
		return false, true
	case err != nil:
		fmt.Fprintf(w, "%v  BAD", err)
		return false, true
	case perr != nil:
		fmt.Fprintf(w, "icrc=%08x ok, transport header BAD", f.ICRC)
		return false, true
	case merr != nil:
		fmt.Fprintf(w, "icrc=%08x ok, MAD BAD", f.ICRC)
		return false, true
	}
	fmt.Fprintf(w, "icrc=%08x ok", f.ICRC)
	return true, true
}

// ipPayloadEnd returns the length of the IP packet of a parsed frame.
func ipPayloadEnd(f *roce.Frame) int {
	ipLen := 20
	if f.Src.Is6() {
		ipLen = 40
	}
	return ipLen + 8 + len(f.IB) + header.ICRCLen
}

func describePacket(w *strings.Builder, p *header.Packet) {
	b := p.BTH
	fmt.Fprintf(w, "%v qp=0x%06x psn=%d", b.Opcode(), b.DestQPN(), b.PSN())
	if b.AckReq() {
		w.WriteString(" A")
	}
	if b.SolicitedEvent() {
		w.WriteString(" SE")
	}
	if b.FECN() {
		w.WriteString(" FECN")
	}
	if b.BECN() {
		w.WriteString(" BECN")
	}
	if b.PKey() != header.DefaultPKey {
		fmt.Fprintf(w, " pkey=0x%04x", b.PKey())
	}
	if p.DETH != nil {
		fmt.Fprintf(w, " qkey=0x%08x srcqp=0x%06x", p.DETH.QKey(), p.DETH.SrcQP())
	}
	if p.RETH != nil {
		fmt.Fprintf(w, " va=0x%x rkey=0x%08x len=%d", p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALength())
	}
	if p.AtomicETH != nil {
		fmt.Fprintf(w, " va=0x%x rkey=0x%08x swap_add=0x%x cmp=0x%x",
			p.AtomicETH.VA(), p.AtomicETH.RKey(), p.AtomicETH.SwapAdd(), p.AtomicETH.Compare())
	}
	if p.AETH != nil {
		fmt.Fprintf(w, " %v msn=%d", p.AETH.Syndrome(), p.AETH.MSN())
	}
	if p.AtomicAckETH != nil {
		fmt.Fprintf(w, " orig=0x%x", p.AtomicAckETH.OrigData())
	}
	if p.ImmDt != nil {
		fmt.Fprintf(w, " imm=0x%08x", p.ImmDt.Imm())
	}
	if p.IETH != nil {
		fmt.Fprintf(w, " inv_rkey=0x%08x", p.IETH.RKey())
	}
	if p.Info().HasPayload {
		fmt.Fprintf(w, " payload=%d", len(p.Payload))
	}
	w.WriteByte(' ')
}
