package xdplink

import (
	"fmt"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/xdp"
)

// Attachment is how a link was attached, as the kernel granted it (not as
// asked): the daemon logs it at startup, since native or generic XDP and
// copy or zero-copy AF_XDP decide most of the link's speed.
type Attachment struct {
	// XDP is "native" (the driver runs the program) or "generic" (the
	// kernel runs it on the skb, after the driver).
	XDP string
	// Bind is "zero-copy" or "copy": the sockets' bind mode read back
	// with XDP_OPTIONS, or "zero-copy on N of M queues" when they differ.
	Bind string
	// Queues is the number of receive queues with a socket.
	Queues int
	// MTU is the interface's MTU (as the link last followed it).
	MTU int
	// Frags is how many UMEM chunks a largest frame takes (1: none is
	// multi-buffer).
	Frags int
	// Driver is what the driver advertises for XDP and AF_XDP
	// (xdp.DriverFeatures), which says why a bind is copy mode; "unknown:
	// ERROR" where the kernel cannot be asked.
	Driver string
	// Note says why softnic chose copy mode where the driver offers
	// zero-copy, or warns that a zero-copy bind asked for is on a driver
	// known to lose such frames; "" otherwise.
	Note string
}

// Attachment returns how the link was attached.
func (l *Link) Attachment() Attachment {
	a := Attachment{XDP: "native", Queues: len(l.socks), MTU: int(l.ifMTU.Load()), Frags: l.frags, Note: l.bindNote}
	if l.prog.Mode() == bpf.ModeGeneric {
		a.XDP = "generic"
	}
	if f, err := xdp.QueryDriverFeatures(l.prog.Ifindex()); err == nil {
		a.Driver = f.String()
	} else {
		a.Driver = "unknown: " + err.Error()
	}
	zc := 0
	for _, s := range l.socks {
		if s.ZeroCopy() {
			zc++
		}
	}
	switch zc {
	case 0:
		a.Bind = "copy"
	case len(l.socks):
		a.Bind = "zero-copy"
	default:
		a.Bind = fmt.Sprintf("zero-copy on %d of %d queues", zc, len(l.socks))
	}
	return a
}
