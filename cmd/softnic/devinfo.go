package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/roce/xdplink"
	"github.com/softnic/softnic/verbs"
)

func init() {
	register("devinfo", "show the RDMA device softnic makes of an interface, like ibv_devinfo", runDevinfo)
}

func runDevinfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ifname := fs.String("d", "", "network interface, or the name of the device a daemon serves on one (required)")
	fs.StringVar(ifname, "ib-dev", "", "same as -d")
	verbose := fs.Bool("v", false, "print all attributes, as ibv_devinfo -v does")
	fs.BoolVar(verbose, "verbose", false, "same as -v")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softnic devinfo -d IFACE|DEVICE [-v]")
		fmt.Fprintln(stderr, "\nPrints the attributes of the RoCEv2 device softnic runs on IFACE in the layout of")
		fmt.Fprintln(stderr, "ibv_devinfo: node GUID from the MAC, port state, MTUs and the GID table, under the")
		fmt.Fprintln(stderr, "name the daemon serving IFACE gives it (softnic_IFACE if none does). It only reads the")
		fmt.Fprintln(stderr, "interface: nothing is attached.\n\nflags:")
		printFlags(stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		return helpStatus(err, 2)
	}
	if *ifname == "" || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	name, iface := defaultDeviceName(*ifname), *ifname
	d, err := lookupDevice(client.RunDir(), *ifname, false)
	switch {
	case err == nil:
		name, iface = d.name, d.iface
	case errors.Is(err, errNotServed):
		if i, ok := treelessDevice(*ifname); ok {
			name, iface = *ifname, i
		}
	case !errors.Is(err, errNotServed) && checkInterface(*ifname) != nil:
		fmt.Fprintf(stderr, "softnic devinfo: %v\n", err)
		return 1
	}
	if err := checkInterface(iface); err != nil {
		fmt.Fprintf(stderr, "softnic devinfo: %v\n", err)
		return 1
	}
	nd, err := xdplink.LookupNetdev(iface)
	if err != nil {
		fmt.Fprintf(stderr, "softnic devinfo: %v\n", err)
		return 1
	}
	io.WriteString(stdout, formatDevinfo(nd, name, *verbose))
	return 0
}

// ibvMTUEnum is the ibv_mtu enum value of an IB MTU in bytes.
func ibvMTUEnum(mtu int) int {
	n := 1
	for m := 256; m < mtu; m *= 2 {
		n++
	}
	return n
}

// nodeGUID is the EUI-64 of the MAC, the GUID Linux gives RoCE devices.
func nodeGUID(mac [6]byte) string {
	return fmt.Sprintf("%02x%02x:%02xff:fe%02x:%02x%02x", mac[0]^0x02, mac[1], mac[2], mac[3], mac[4], mac[5])
}

// formatDevinfo lays out nd, as device name, as ibv_devinfo (rdma-core
// 44) prints an rxe device, with softnic's own limits.
func formatDevinfo(nd *xdplink.Netdev, name string, verbose bool) string {
	var b strings.Builder
	kv := func(indent, key string, tabs int, format string, a ...any) {
		fmt.Fprintf(&b, "%s%s:%s%s\n", indent, key, strings.Repeat("\t", tabs), fmt.Sprintf(format, a...))
	}
	guid := nodeGUID(nd.MAC)
	fmt.Fprintf(&b, "hca_id:\t%s\n", name)
	kv("\t", "transport", 3, "InfiniBand (0)")
	kv("\t", "fw_ver", 4, "0.0.0")
	kv("\t", "node_guid", 3, "%s", guid)
	kv("\t", "sys_image_guid", 3, "%s", guid)
	kv("\t", "vendor_id", 3, "0xffffff")
	kv("\t", "vendor_part_id", 3, "0")
	kv("\t", "hw_ver", 4, "0x0")
	kv("\t", "phys_port_cnt", 3, "1")
	if verbose {
		kv("\t", "max_qp_wr", 3, "%d", ibv.MaxQPWR)
		kv("\t", "max_sge", 3, "%d", ibv.MaxSGE)
		kv("\t", "max_sge_rd", 3, "%d", ibv.MaxSGE)
		kv("\t", "max_cqe", 3, "%d", verbs.MaxCQE)
		kv("\t", "max_qp_rd_atom", 3, "%d", ibv.MaxRdAtomic)
		kv("\t", "max_qp_init_rd_atom", 2, "%d", ibv.MaxRdAtomic)
		kv("\t", "atomic_cap", 3, "ATOMIC_HCA (1)")
		kv("\t", "max_pkeys", 3, "1")
		kv("\t", "local_ca_ack_delay", 2, "15")
	}
	state, phys := "PORT_ACTIVE (4)", "LINK_UP (5)"
	if !nd.Up {
		state, phys = "PORT_DOWN (1)", "DISABLED (3)"
	}
	active := nd.ActiveMTU()
	fmt.Fprintf(&b, "\t\tport:\t1\n")
	kv("\t\t\t", "state", 3, "%s", state)
	kv("\t\t\t", "max_mtu", 2, "4096 (5)")
	kv("\t\t\t", "active_mtu", 2, "%d (%d)", active, ibvMTUEnum(active))
	kv("\t\t\t", "sm_lid", 3, "0")
	kv("\t\t\t", "port_lid", 2, "0")
	kv("\t\t\t", "port_lmc", 2, "0x00")
	kv("\t\t\t", "link_layer", 2, "Ethernet")
	if verbose {
		kv("\t\t\t", "max_msg_sz", 2, "0x80000000")
		kv("\t\t\t", "port_cap_flags", 2, "0x00010000")
		kv("\t\t\t", "max_vl_num", 2, "1 (1)")
		kv("\t\t\t", "pkey_tbl_len", 2, "1")
		kv("\t\t\t", "gid_tbl_len", 2, "%d", len(nd.GIDs))
		kv("\t\t\t", "phys_state", 2, "%s", phys)
		for i, g := range nd.GIDs {
			kv("\t\t\t", fmt.Sprintf("GID[%3d]", i), 2, "%s, RoCE v2", gidText(g))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// gidText prints a GID as ibv_devinfo does: the IPv6 text form of the
// 16 bytes (an IPv4 address shows as ::ffff:a.b.c.d).
func gidText(a netip.Addr) string { return netip.AddrFrom16(a.As16()).String() }
