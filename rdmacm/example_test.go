package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/verbs"
)

// A client connects to a server's port 7174 (rping's) and disconnects,
// as rdma_resolve_addr, rdma_resolve_route, rdma_create_qp and
// rdma_connect do.
func Example() {
	var dev *verbs.Device // opened with verbs.Open on the link to the server
	c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{dev}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ch := c.NewEventChannel()
	id, err := c.CreateID(ch, rdmacm.PortSpaceTCP)
	if err != nil {
		panic(err)
	}
	defer id.Destroy()
	ctx := context.Background()
	expect := func(want rdmacm.EventType) error {
		ev, err := ch.Get(ctx)
		if err == nil && ev.Type != want {
			err = fmt.Errorf("%v (%v), want %v", ev.Type, ev.Err, want)
		}
		return err
	}
	server := netip.MustParseAddrPort("10.0.0.2:7174")
	if err := id.ResolveAddr(netip.Addr{}, server, 2*time.Second); err != nil {
		panic(err)
	}
	if err := expect(rdmacm.EventAddrResolved); err != nil {
		panic(err)
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		panic(err)
	}
	if err := expect(rdmacm.EventRouteResolved); err != nil {
		panic(err)
	}
	cq, err := id.Device().CreateCQ(16, nil)
	if err != nil {
		panic(err)
	}
	_, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	if err != nil {
		panic(err)
	}
	if err := id.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		panic(err)
	}
	if err := expect(rdmacm.EventEstablished); err != nil {
		panic(err) // EventRejected: nobody listens on the port
	}
	// ... post work requests on id.QP() ...
	if err := id.Disconnect(); err != nil {
		panic(err)
	}
	if err := expect(rdmacm.EventDisconnected); err != nil {
		panic(err)
	}
}
