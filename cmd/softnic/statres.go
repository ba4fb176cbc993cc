package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/rdmacm"
)

// deviceStat is what softnic stat learned of one served device: its
// index among the run directory's devices (sorted by name), its name and
// its resources.
type deviceStat struct {
	index int
	name  string
	res   session.Resources
}

// runStatRes is `softnic stat res`: the devices' objects, as `rdma
// resource show` prints a kernel device's.
func runStatRes(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stat res", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ifname := fs.String("d", "", "show this device only (its name, or its interface's here), with a line per session (process)")
	runDir := fs.String("run-dir", client.RunDir(), "the daemons' run directory (default $SOFTNIC_RUN_DIR, else /run/softnic)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic stat res [cm_id] [-d DEVICE|IFACE]")
		fmt.Fprintln(stderr, "\nPrints, for each device a softnic daemon serves, its objects as `rdma resource show`")
		fmt.Fprintln(stderr, "does (ctx: sessions, the processes using it); with -d, then a line per session:")
		fmt.Fprintln(stderr, "its number (ctxn), pid, command and objects. With cm_id, a line per rdma_cm ID, as")
		fmt.Fprintln(stderr, "`rdma resource show cm_id`. It opens no session itself.\n\nflags:")
		printFlags(stderr, fs)
	}
	pos, status, ok := parseArgs(fs, args, 2)
	if !ok {
		return status
	}
	cmIDs := len(pos) == 1 && pos[0] == "cm_id"
	if len(pos) != 0 && !cmIDs {
		fs.Usage()
		return 2
	}
	fail := failer(stderr, "stat res")
	names, err := client.DeviceNamesIn(*runDir)
	if err != nil {
		return fail("%v", err)
	}
	shown := make([]int, len(names))
	for i := range names {
		shown[i] = i
	}
	if *ifname != "" {
		name, err := statDeviceName(*runDir, *ifname)
		if err != nil {
			return fail("%v", err)
		}
		i := slices.Index(names, name)
		if i < 0 {
			return fail("no daemon serves %s (its socket %s is gone)", *ifname, filepath.Join(*runDir, name+".sock"))
		}
		shown = []int{i}
	}
	status = 0
	for _, i := range shown {
		if err := showDevice(stdout, *runDir, i, names[i], cmIDs, *ifname != ""); err != nil {
			status = fail("%s: %v", names[i], err)
		}
	}
	return status
}

// showDevice prints what the daemon serving device name (the run
// directory's index-th) holds: with cmIDs a line per rdma_cm ID, else its
// summary line and, with sessions, a line per session.
func showDevice(w io.Writer, runDir string, index int, name string, cmIDs, sessions bool) error {
	m, err := session.DialMonitor(filepath.Join(runDir, name+".sock"))
	if err != nil {
		return err
	}
	defer m.Close()
	if cmIDs {
		ids, err := m.CMIDs()
		for _, id := range ids {
			fmt.Fprintln(w, cmIDLine(name, id))
		}
		return err
	}
	res, err := m.Resources()
	if err != nil {
		return err
	}
	d := deviceStat{index: index, name: name, res: res}
	printSummary(w, d)
	if sessions {
		printSessions(w, d)
	}
	return nil
}

// printSummary prints the device's line as `rdma resource show` does.
func printSummary(w io.Writer, d deviceStat) {
	t := d.res.Total
	fmt.Fprintf(w, "%d: %s: pd %d cq %d qp %d cm_id %d mr %d ctx %d srq %d\n", d.index, d.name, t.PD, t.CQ, t.QP,
		t.CMID, t.MR, d.res.Sessions, t.SRQ)
}

// printSessions prints a line per session, in the way `rdma resource
// show ctx` names a context (dev, ctxn, pid, comm), with its objects;
// cm_listen counts its CM IDs in state LISTEN.
func printSessions(w io.Writer, d deviceStat) {
	for _, s := range d.res.Session {
		c := s.Counts
		fmt.Fprintf(w, "dev %s ctxn %d pid %d comm %s pd %d cq %d qp %d cm_id %d cm_listen %d mr %d srq %d ah %d comp_channel %d\n",
			d.name, s.ID, s.PID, commName(s.Comm), c.PD, c.CQ, c.QP, c.CMID, s.Listening, c.MR, c.SRQ, c.AH, c.Channel)
	}
}

// commName is a command name as the daemon sends it (/proc/PID/comm,
// NUL-padded), "-" when the daemon could not read it.
func commName(comm [16]byte) string {
	if n := strings.TrimRight(string(comm[:]), "\x00"); n != "" {
		return n
	}
	return "-"
}

// cmIDLine is one rdma_cm ID in `rdma resource show cm_id`'s layout.
func cmIDLine(dev string, id hostif.CMIDRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "link %s/1 cm-idn %d", dev, id.ID)
	if id.QPType != 0 {
		fmt.Fprintf(&b, " lqpn %d qp-type %s", id.QPN, ibvQPTypeName(id.QPType))
	}
	state := "UNKNOWN"
	if int(id.State) < len(rdmacm.KernelStateNames) {
		state = rdmacm.KernelStateNames[id.State]
	}
	ps := strings.ToUpper(portSpaceName(mad.PortSpace(id.PortSpace))) // as rdma prints it
	fmt.Fprintf(&b, " state %s ps %s pid %d comm %s", state, cmp.Or(ps, "-"), id.PID, commName(id.Comm))
	if local := hostif.CMAddrPort(id.Local, id.LocalPort); local.IsValid() {
		fmt.Fprintf(&b, " src-addr %s", local)
	}
	if peer := hostif.CMAddrPort(id.Peer, id.PeerPort); peer.IsValid() && !peer.Addr().IsUnspecified() {
		fmt.Fprintf(&b, " dst-addr %s", peer)
	}
	return b.String()
}

func ibvQPTypeName(t uint8) string {
	switch t {
	case 2:
		return "RC"
	case 3:
		return "UC"
	case 4:
		return "UD"
	}
	return fmt.Sprintf("%d", t)
}
