package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// describeMAD writes what a CM MAD says: the attribute, the communication
// IDs and the fields a reader of a connection exchange looks for. It
// returns Parse's error for a MAD it cannot read, after writing why.
func describeMAD(w *strings.Builder, b []byte) error {
	m, err := mad.Parse(b)
	if err != nil {
		w.WriteString("MAD")
		if len(b) >= mad.HeaderLen {
			h := mad.Header(b)
			fmt.Fprintf(w, " class=0x%02x/%d method=0x%02x %v", h.MgmtClass(), h.ClassVersion(), h.Method(), h.AttrID())
		}
		fmt.Fprintf(w, " [%v] ", err)
		return err
	}
	fmt.Fprintf(w, "%v ", m.Header().AttrID())
	switch m.Header().AttrID() {
	case mad.AttrREQ:
		describeREQ(w, mad.REQ(m))
	case mad.AttrMRA:
		r := mad.MRA(m)
		writeCommIDs(w, r.LocalCommID(), r.RemoteCommID())
		fmt.Fprintf(w, " msg=%d timeout=%d", r.MessageMRAed(), r.ServiceTimeout())
	case mad.AttrREJ:
		r := mad.REJ(m)
		writeCommIDs(w, r.LocalCommID(), r.RemoteCommID())
		fmt.Fprintf(w, " msg=%d reason=%d", r.MessageRejected(), r.Reason())
	case mad.AttrREP:
		r := mad.REP(m)
		writeCommIDs(w, r.LocalCommID(), r.RemoteCommID())
		fmt.Fprintf(w, " qpn=0x%06x psn=%d", r.LocalQPN(), r.StartingPSN())
	case mad.AttrRTU:
		writeCommIDs(w, mad.RTU(m).LocalCommID(), mad.RTU(m).RemoteCommID())
	case mad.AttrDREQ:
		r := mad.DREQ(m)
		writeCommIDs(w, r.LocalCommID(), r.RemoteCommID())
		fmt.Fprintf(w, " rqpn=0x%06x", r.RemoteQPN())
	case mad.AttrDREP:
		writeCommIDs(w, mad.DREP(m).LocalCommID(), mad.DREP(m).RemoteCommID())
	}
	w.WriteByte(' ')
	return nil
}

func writeCommIDs(w *strings.Builder, local, remote uint32) {
	fmt.Fprintf(w, "lcid=0x%08x rcid=0x%08x", local, remote)
}

// describeREQ writes a REQ's communication ID, service ID and QP, and for an
// rdma_cm service the addresses and ports of its private-data header.
func describeREQ(w *strings.Builder, r mad.REQ) {
	fmt.Fprintf(w, "lcid=0x%08x sid=0x%016x", r.LocalCommID(), r.ServiceID())
	ps, port, ok := mad.SplitServiceID(r.ServiceID())
	if ok {
		if name := portSpaceName(ps); name != "" {
			fmt.Fprintf(w, " (%s:%d)", name, port)
			h := r.CMAHeader()
			if err := h.Check(); err != nil {
				fmt.Fprintf(w, " [rdma_cm header: %v]", err)
			} else {
				fmt.Fprintf(w, " %v > %v", netip.AddrPortFrom(h.SrcAddr(), h.SrcPort()), netip.AddrPortFrom(h.DstAddr(), port))
			}
		}
	}
	fmt.Fprintf(w, " qpn=0x%06x psn=%d mtu=%s", r.LocalQPN(), r.StartingPSN(), pathMTU(r.PathMTU()))
}

func portSpaceName(ps mad.PortSpace) string {
	switch ps {
	case mad.PortSpaceTCP:
		return "tcp"
	case mad.PortSpaceUDP:
		return "udp"
	case mad.PortSpaceIPoIB:
		return "ipoib"
	case mad.PortSpaceIB:
		return "ib"
	}
	return ""
}

// pathMTU formats an IB MTU enum as bytes.
func pathMTU(m ibv.MTU) string {
	if m.Bytes() == 0 {
		return fmt.Sprintf("invalid(%d)", m)
	}
	return fmt.Sprint(m.Bytes())
}
