package main

import (
	"fmt"
	"io"

	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

// printBind says on w how the device's AF_XDP sockets bound, as the
// kernel granted it (xdplink.Link.Attachment), before the test starts:
// --softnic-xdp-bind auto may fall back to copy mode, and a benchmark
// must tell which mode a figure was measured in. A device of a daemon,
// or on another link (the tests' in-memory one), prints nothing: its
// sockets are not this process's.
func printBind(w io.Writer, ifname string, dev *verbs.Device) {
	if dev.Remote() {
		return
	}
	xl, ok := dev.RoCE().Link().(*xdplink.Link)
	if !ok {
		return
	}
	a := xl.Attachment()
	fmt.Fprintln(w, bindLine(ifname, a))
	if a.Note != "" {
		fmt.Fprintf(w, "softnic: %s: %s\n", ifname, a.Note)
	}
}

// bindLine is printBind's line; bench-vm parses it (its vmBindRE).
func bindLine(ifname string, a xdplink.Attachment) string {
	return fmt.Sprintf("softnic: %s: AF_XDP bind %s, XDP %s, %d queues", ifname, a.Bind, a.XDP, a.Queues)
}
