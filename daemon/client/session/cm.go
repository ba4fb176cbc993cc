package session

import (
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// The connection manager's calls (rdma_cm through the daemon): the
// daemon runs the IDs; an event channel's pipe becomes readable when
// events wait, which GetCMEvent takes one at a time.

// CMChannel is an event channel: File becomes readable when an event of
// one of its IDs is queued.
type CMChannel struct {
	Handle uint32
	File   *os.File
}

// CMCreateChannel creates an event channel (rdma_create_event_channel).
func (c *Conn) CMCreateChannel() (*CMChannel, error) {
	var r hostif.HandleReply
	fds, err := c.call(hostif.OpCMCreateChannel, hostif.Empty{}, &r)
	if err != nil {
		return nil, err
	}
	fd, err := oneFD(fds, "CM channel")
	if err != nil {
		return nil, err
	}
	// Non-blocking, the file is the runtime poller's: Close ends a Read
	// waiting on it.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &CMChannel{Handle: r.Handle, File: os.NewFile(uintptr(fd), "softnic-cm-channel")}, nil
}

// CMDestroyChannel destroys the daemon's event channel handle, which no
// ID may send its events to any more (EBUSY otherwise), as
// rdma_destroy_event_channel does; the caller closes its File.
func (c *Conn) CMDestroyChannel(handle uint32) error {
	_, err := c.call(hostif.OpCMDestroyChannel, hostif.CMGetEventRequest{Channel: handle}, &hostif.Empty{})
	return err
}

// CMCreateID creates an ID in port space ps whose events go to channel
// (rdma_create_id) and returns its handle.
func (c *Conn) CMCreateID(channel uint32, ps uint16, userHandle uint64) (uint32, error) {
	var r hostif.HandleReply
	_, err := c.call(hostif.OpCMCreateID, hostif.CMCreateIDRequest{Channel: channel, PortSpace: uint32(ps), UserHandle: userHandle}, &r)
	return r.Handle, err
}

// CMAddrs are an ID's local and peer addresses.
type CMAddrs struct{ Local, Peer netip.AddrPort }

func cmAddrs(r hostif.CMAddrReply) CMAddrs {
	return CMAddrs{Local: hostif.CMAddrPort(r.Local, r.LocalPort), Peer: hostif.CMAddrPort(r.Peer, r.PeerPort)}
}

// CMBind binds an ID (rdma_bind_addr) and returns its addresses.
func (c *Conn) CMBind(id uint32, ap netip.AddrPort) (CMAddrs, error) {
	var r hostif.CMAddrReply
	_, err := c.call(hostif.OpCMBind, hostif.CMAddrRequest{ID: id, Port: ap.Port(), Addr: hostif.CMAddr(ap.Addr())}, &r)
	return cmAddrs(r), err
}

// CMQueryAddr returns an ID's addresses.
func (c *Conn) CMQueryAddr(id uint32) (CMAddrs, error) {
	var r hostif.CMAddrReply
	_, err := c.call(hostif.OpCMQueryAddr, hostif.HandleRequest{Handle: id}, &r)
	return cmAddrs(r), err
}

// CMResolveAddr starts resolving dst from src (invalid: the bound
// address or the route's) (rdma_resolve_addr).
func (c *Conn) CMResolveAddr(id uint32, src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	req := hostif.CMResolveAddrRequest{ID: id, TimeoutMS: uint32(timeout.Milliseconds()), DstPort: dst.Port(),
		Src: hostif.CMAddr(src), Dst: hostif.CMAddr(dst.Addr())}
	_, err := c.call(hostif.OpCMResolveAddr, req, &hostif.Empty{})
	return err
}

// CMResolveRoute starts resolving the route (rdma_resolve_route).
func (c *Conn) CMResolveRoute(id uint32, timeout time.Duration) error {
	_, err := c.call(hostif.OpCMResolveRoute, hostif.CMResolveRouteRequest{ID: id, TimeoutMS: uint32(timeout.Milliseconds())}, &hostif.Empty{})
	return err
}

// CMCreateQP creates the ID's QP, in INIT (rdma_create_qp): a QP of the
// session like CreateQP's.
func (c *Conn) CMCreateQP(id uint32, req hostif.CreateQPRequest) (*QP, error) {
	return c.createQP(hostif.OpCMCreateQP, hostif.CMCreateQPRequest{ID: id, QP: req})
}

// CMSetOption sets one of the ID's options (rdma_set_option).
func (c *Conn) CMSetOption(id, option, value uint32) error {
	_, err := c.call(hostif.OpCMSetOption, hostif.CMSetOptionRequest{ID: id, Option: option, Value: value}, &hostif.Empty{})
	return err
}

// CMJoinMcast joins the ID to multicast group addr (rdma_join_multicast_ex).
func (c *Conn) CMJoinMcast(id, flags uint32, addr netip.Addr) error {
	_, err := c.call(hostif.OpCMJoinMcast, hostif.CMMcastRequest{ID: id, Flags: flags, Addr: hostif.CMAddr(addr)}, &hostif.Empty{})
	return err
}

// CMLeaveMcast leaves a group the ID joined (rdma_leave_multicast).
func (c *Conn) CMLeaveMcast(id uint32, addr netip.Addr) error {
	_, err := c.call(hostif.OpCMLeaveMcast, hostif.CMMcastRequest{ID: id, Addr: hostif.CMAddr(addr)}, &hostif.Empty{})
	return err
}

// CMMigrateID sends the ID's events to another channel (rdma_migrate_id).
func (c *Conn) CMMigrateID(id, channel uint32) error {
	_, err := c.call(hostif.OpCMMigrateID, hostif.CMMigrateRequest{ID: id, Channel: channel}, &hostif.Empty{})
	return err
}

// CMDetachQP has the ID let go of its QP (rdma_destroy_qp before the QP's
// destroy_qp).
func (c *Conn) CMDetachQP(id uint32) error {
	_, err := c.call(hostif.OpCMDetachQP, hostif.HandleRequest{Handle: id}, &hostif.Empty{})
	return err
}

// CMConnect connects (rdma_connect).
func (c *Conn) CMConnect(p hostif.CMConnParam) error {
	_, err := c.call(hostif.OpCMConnect, p, &hostif.Empty{})
	return err
}

// CMListen listens (rdma_listen) and returns the ID's addresses.
func (c *Conn) CMListen(id uint32, backlog int) (CMAddrs, error) {
	var r hostif.CMAddrReply
	_, err := c.call(hostif.OpCMListen, hostif.CMListenRequest{ID: id, Backlog: uint32(max(backlog, 0))}, &r)
	return cmAddrs(r), err
}

// CMAccept accepts a connection request (rdma_accept).
func (c *Conn) CMAccept(p hostif.CMConnParam) error {
	_, err := c.call(hostif.OpCMAccept, p, &hostif.Empty{})
	return err
}

// CMReject rejects a connection request (rdma_reject).
func (c *Conn) CMReject(id uint32, privateData []byte) error {
	p := hostif.CMConnParam{ID: id, PrivateLen: uint32(len(privateData))}
	copy(p.Private[:], privateData)
	_, err := c.call(hostif.OpCMReject, p, &hostif.Empty{})
	return err
}

// CMDisconnect disconnects (rdma_disconnect).
func (c *Conn) CMDisconnect(id uint32) error {
	_, err := c.call(hostif.OpCMDisconnect, hostif.HandleRequest{Handle: id}, &hostif.Empty{})
	return err
}

// CMInitQPAttr returns the attributes that move a QP of the ID's
// connection to state (rdma_init_qp_attr).
func (c *Conn) CMInitQPAttr(id uint32, state ibv.QPState) (*ibv.QPAttr, ibv.QPAttrMask, error) {
	var r hostif.ModifyQPRequest
	if _, err := c.call(hostif.OpCMInitQPAttr, hostif.CMInitQPAttrRequest{ID: id, State: uint32(state)}, &r); err != nil {
		return nil, 0, err
	}
	return hostif.QPAttrOf(&r), ibv.QPAttrMask(r.Mask), nil
}

// CMEstablish sends the RTU of an active ID whose QP is the program's
// (rdma_establish).
func (c *Conn) CMEstablish(id uint32) error {
	_, err := c.call(hostif.OpCMEstablish, hostif.HandleRequest{Handle: id}, &hostif.Empty{})
	return err
}

// CMDestroyID destroys an ID (rdma_destroy_id).
func (c *Conn) CMDestroyID(id uint32) error {
	_, err := c.call(hostif.OpCMDestroyID, hostif.HandleRequest{Handle: id}, &hostif.Empty{})
	return err
}

// CMGetEvent takes the next event of channel; ok is false when none is
// queued.
func (c *Conn) CMGetEvent(channel uint32) (ev hostif.CMEvent, ok bool, err error) {
	_, err = c.call(hostif.OpCMGetEvent, hostif.CMGetEventRequest{Channel: channel}, &ev)
	if e, isErr := err.(*Error); isErr && e.Errno == unix.EAGAIN { // none queued
		return ev, false, nil
	}
	return ev, err == nil, err
}
