package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/tools/oob"
)

// Timeouts of the -R mode, perftest's where it has them.
const (
	// cmResolveTimeout is what perftest gives rdma_resolve_addr and
	// rdma_resolve_route (2000 ms).
	cmResolveTimeout = 2 * time.Second
	// cmResolveRetries is NUM_OF_RETRIES: ADDR_ERROR and ROUTE_ERROR
	// events perftest tolerates.
	cmResolveRetries = 10
	// cmEventTimeout bounds a wait for one CM event of a connection under
	// way; perftest waits without a limit.
	cmEventTimeout = 30 * time.Second
	// cmRetryDelay is the pause between attempts to connect (the 100 ms of
	// rdma_cm_client_connection).
	cmRetryDelay = 100 * time.Millisecond
)

// CMPeer says where the -R connections go: for a client the server's
// address and port (perftest's host and -p); a server listens on Port of
// every address (rdma_bind_addr to INADDR_ANY).
type CMPeer struct {
	Server netip.AddrPort
	// Wait is how long a client keeps trying while the server does not
	// listen yet (perftest does not retry the first connection; 0: once).
	Wait time.Duration
}

// RunRDMACM runs one perftest test in the -R mode: the exchange goes over
// an RC QP that cm connects (establish_connection), the test QPs are
// connected through cm too (create_rdma_cm_connection), and the test
// runs as Run's. dev is the device of cm the run uses; p.RDMACM is set.
func RunRDMACM(ctx context.Context, cm *rdmacm.CM, dev Device, peer CMPeer, p Params, out io.Writer) error {
	p.RDMACM = true
	if err := p.prepare(dev, out); err != nil {
		return err
	}
	if p.Server {
		PrintWaiting(out, &p)
	}
	conn, err := establishConnection(ctx, cm, dev, peer, &p)
	if err != nil {
		return err
	}
	defer conn.close()
	sess := oob.NewRDMACMSession(conn.x, p.role(), 0, p.GIDIndex)
	qc := &cmConnector{cm: cm, sess: sess, peer: peer}
	return runSession(ctx, dev, sess, p, out, qc)
}

// cmExchange is the exchange's rdma_cm connection (perftest's
// comm->rdma_ctx with its cm_id and cm_channel).
type cmExchange struct {
	ch *rdmacm.EventChannel
	id *rdmacm.ID
	x  *exchangeQP
}

// close ends the exchange connection. perftest never disconnects it (its
// process exit does); here it is disconnected and destroyed at once.
func (c *cmExchange) close() {
	if c.id != nil {
		c.id.Disconnect()
		c.id.DestroyQP()
		c.id.Destroy()
	}
	if c.x != nil {
		c.x.close()
	}
	c.ch.Close()
}

// exchangeConnParam is the conn_param perftest gives the exchange
// connection: no RDMA READ resources (its verb is SEND), the retry count
// and an RNR retry count of 7.
func exchangeConnParam(p *Params) *rdmacm.ConnParam {
	return &rdmacm.ConnParam{RetryCount: p.RetryCount, RNRRetryCount: 7}
}

// establishConnection is perftest's establish_connection with rdma_cm:
// rdma_client_connect or rdma_server_connect on port p.Port.
func establishConnection(ctx context.Context, cm *rdmacm.CM, dev Device, peer CMPeer, p *Params) (*cmExchange, error) {
	if p.Server {
		return rdmaServerConnect(ctx, cm, dev, p)
	}
	deadline := time.Now().Add(peer.Wait)
	for {
		c, err := rdmaClientConnect(ctx, cm, dev, peer, p)
		if err == nil || !errors.Is(err, errCMRefused) || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cmRetryDelay):
		}
	}
}

// errCMRefused is a connection the server rejected or did not answer,
// as when it does not listen yet.
var errCMRefused = errors.New("perftest: rdma_cm connection refused")

// rdmaClientConnect is rdma_client_connect: resolve the server's address
// and route, create the exchange QP, post its receive, connect.
func rdmaClientConnect(ctx context.Context, cm *rdmacm.CM, dev Device, peer CMPeer, p *Params) (*cmExchange, error) {
	c := &cmExchange{ch: cm.NewEventChannel()}
	id, err := cm.CreateID(c.ch, rdmacm.PortSpaceTCP)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("rdma_create_id: %w", err)
	}
	c.id = id
	if err := resolve(ctx, c.ch, id, peer.Server); err != nil {
		c.close()
		return nil, err
	}
	if err := c.createQP(ctx, dev); err != nil {
		c.close()
		return nil, err
	}
	if err := id.Connect(exchangeConnParam(p)); err != nil {
		c.close()
		return nil, fmt.Errorf("rdma_connect: %w", err)
	}
	if _, err := awaitCMEvent(ctx, c.ch, rdmacm.EventEstablished); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// rdmaServerConnect is rdma_server_connect: listen on every address at
// p.Port, take one connection request, create the exchange QP, post its
// receive, accept, and stop listening.
func rdmaServerConnect(ctx context.Context, cm *rdmacm.CM, dev Device, p *Params) (*cmExchange, error) {
	c := &cmExchange{ch: cm.NewEventChannel()}
	listen, err := listenCM(cm, c.ch, p.Port, 1)
	if err != nil {
		c.close()
		return nil, err
	}
	defer listen.Destroy()
	ev, err := waitCMEvent(ctx, c.ch, 0, rdmacm.EventConnectRequest)
	if err != nil {
		c.close()
		return nil, err
	}
	c.id = ev.ID
	if err := c.createQP(ctx, dev); err != nil {
		c.id.Reject(nil)
		c.close()
		return nil, err
	}
	if err := c.id.Accept(exchangeConnParam(p)); err != nil {
		c.close()
		return nil, fmt.Errorf("rdma_accept: %w", err)
	}
	// perftest goes on without waiting; the wait makes sure the QP can
	// send before this side's first answer.
	if _, err := awaitCMEvent(ctx, c.ch, rdmacm.EventEstablished); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// createQP makes the exchange QP on the ID's device and posts its receive.
func (c *cmExchange) createQP(ctx context.Context, dev Device) error {
	if c.id.Device() != dev.Verbs {
		return fmt.Errorf("rdma_cm routed the exchange to another device than %s", dev.Name)
	}
	x, err := newExchangeQP(ctx, dev.Verbs)
	if err != nil {
		return err
	}
	c.x = x
	qp, err := c.id.CreateQP(x.pd, x.initAttr())
	if err != nil {
		return fmt.Errorf("rdma_create_qp: %w", err)
	}
	return x.attach(qp)
}

// listenCM binds a new ID to port on every IPv4 address and listens.
func listenCM(cm *rdmacm.CM, ch *rdmacm.EventChannel, port, backlog int) (*rdmacm.ID, error) {
	id, err := cm.CreateID(ch, rdmacm.PortSpaceTCP)
	if err != nil {
		return nil, fmt.Errorf("rdma_create_id: %w", err)
	}
	if err := id.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))); err != nil {
		id.Destroy()
		return nil, fmt.Errorf("rdma_bind_addr port %d: %w", port, err)
	}
	if err := id.Listen(backlog); err != nil {
		id.Destroy()
		return nil, fmt.Errorf("rdma_listen: %w", err)
	}
	return id, nil
}

// resolve resolves dst's address and route on id, tolerating
// cmResolveRetries address or route errors as perftest does.
func resolve(ctx context.Context, ch *rdmacm.EventChannel, id *rdmacm.ID, dst netip.AddrPort) error {
	steps := []struct {
		start      func() error
		done, fail rdmacm.EventType
	}{
		{func() error { return id.ResolveAddr(netip.Addr{}, dst, cmResolveTimeout) }, rdmacm.EventAddrResolved, rdmacm.EventAddrError},
		{func() error { return id.ResolveRoute(cmResolveTimeout) }, rdmacm.EventRouteResolved, rdmacm.EventRouteError},
	}
	retries := cmResolveRetries
	for _, s := range steps {
		for {
			if err := s.start(); err != nil {
				return fmt.Errorf("resolve %v: %w", dst, err)
			}
			ev, err := waitCMEvent(ctx, ch, cmResolveTimeout+time.Second, s.done, s.fail)
			if err != nil {
				return err
			}
			if ev.Type == s.done {
				break
			}
			if retries--; retries <= 0 {
				return fmt.Errorf("resolve %v: %d times %v: %v", dst, cmResolveRetries, ev.Type, ev.Err)
			}
		}
	}
	return nil
}

// awaitCMEvent waits up to cmEventTimeout for an event of type want.
func awaitCMEvent(ctx context.Context, ch *rdmacm.EventChannel, want rdmacm.EventType) (rdmacm.Event, error) {
	return waitCMEvent(ctx, ch, cmEventTimeout, want)
}

// waitCMEvent takes the next event of ch, within timeout if not zero. An
// event not in want ends the connection as perftest ends it ("unexpected
// CM event"); a rejection or an unreachable peer is errCMRefused.
func waitCMEvent(ctx context.Context, ch *rdmacm.EventChannel, timeout time.Duration, want ...rdmacm.EventType) (rdmacm.Event, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ev, err := ch.Get(ctx)
	if err != nil {
		return ev, fmt.Errorf("rdma_get_cm_event (want %v): %w", want, err)
	}
	for _, w := range want {
		if ev.Type == w {
			return ev, nil
		}
	}
	switch ev.Type {
	case rdmacm.EventRejected:
		return ev, fmt.Errorf("%w: %v (reason %v)", errCMRefused, ev.Type, ev.Reason)
	case rdmacm.EventUnreachable:
		return ev, fmt.Errorf("%w: %v: %v", errCMRefused, ev.Type, ev.Err)
	}
	return ev, fmt.Errorf("unexpected CM event %v (want %v): %v", ev.Type, want, ev.Err)
}
