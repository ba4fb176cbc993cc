package perftest

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

const (
	// cmConnectAttempts is rdma_cm_client_connection's max_retries.
	cmConnectAttempts = 10
	// cmDisconnectTimeout bounds the wait for the DISCONNECTED events of
	// the test connections; perftest's client waits without a limit.
	cmDisconnectTimeout = 5 * time.Second
	// minRNRTimer is perftest's MIN_RNR_TIMER, which its -R server sets on
	// each accepted QP (the kernel's rdma_cm leaves it at 0; softnic's
	// rdmacm sets 12 already, so here it changes nothing).
	minRNRTimer = 12
)

// cmConnector is the -R mode's qpConnector: create_rdma_cm_connection
// connects one rdma_cm connection per test QP, to the same port as the
// exchange's, between two handshakes on the exchange; no keys are needed
// to connect, so connectQPs only keeps the peer's; release disconnects
// (rdma_cm_disconnect_nodes) and destroys the IDs.
type cmConnector struct {
	cm   *rdmacm.CM
	sess *oob.Session
	peer CMPeer
	ch   *rdmacm.EventChannel
	ids  []*rdmacm.ID // every test ID, with or without its QP
	up   []*rdmacm.ID // the connected ones
}

// createQPs is create_rdma_cm_connection. perftest's handshakes around
// the connection carry its still zeroed keys; so do these. perftest's
// server listens after the first handshake, racing the client's requests
// (which it retries); this one listens before it, which the client cannot
// tell apart except that its first attempt finds the listener.
func (c *cmConnector) createQPs(r *runCtx) error {
	c.ch = c.cm.NewEventChannel()
	var listen *rdmacm.ID
	if r.p.Server {
		var err error
		if listen, err = listenCM(c.cm, c.ch, r.p.Port, r.p.NumQPs); err != nil {
			return err
		}
		defer listen.Destroy()
	}
	if err := c.sess.Handshake(oob.PerftestDest{}); err != nil {
		return fmt.Errorf("sync before the rdma_cm connection: %w", err)
	}
	var err error
	if r.p.Server {
		err = c.serverConnection(r)
	} else {
		err = c.clientConnection(r)
	}
	if err != nil {
		return err
	}
	if err := c.sess.Handshake(oob.PerftestDest{}); err != nil {
		return fmt.Errorf("sync after the rdma_cm connection: %w", err)
	}
	return nil
}

// connectQPs stands where ctx_connect is skipped with -R: rdma_cm
// connected the QPs already; the peer's keys address its buffer.
func (c *cmConnector) connectQPs(r *runCtx, remote []oob.PerftestDest) error {
	r.remote = remote
	return nil
}

// testConnParam is the conn_param of a test connection, both sides:
// READ and atomic tests offer and ask out_reads outstanding requests, and
// the retry count serves as the RNR retry count too.
func testConnParam(p *Params) *rdmacm.ConnParam {
	cp := &rdmacm.ConnParam{RetryCount: p.RetryCount, RNRRetryCount: p.RetryCount}
	if v := p.Verb(); v == VerbRead || v == VerbAtomic {
		cp.ResponderResources = uint8(min(p.OutReads, 255))
		cp.InitiatorDepth = cp.ResponderResources
	}
	return cp
}

// clientConnection is rdma_cm_client_connection: up to 10 attempts, 100
// ms apart, each with new IDs. (perftest 4.5-0.17 frees its IDs after a
// failed attempt and retries with the freed ones; a fresh start is what
// it means to do.)
func (c *cmConnector) clientConnection(r *runCtx) error {
	var err error
	for attempt := 0; attempt < cmConnectAttempts; attempt++ {
		if err = c.tryClientConnection(r); err == nil {
			return nil
		}
		c.destroy(r)
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(cmRetryDelay):
		}
	}
	return fmt.Errorf("rdma_cm client: %d attempts: %w", cmConnectAttempts, err)
}

// tryClientConnection connects the first QP alone, then the others at
// once (perftest resolves an ID per QP at once): a server not yet
// listening rejects the first, and no connection of the failed attempt is
// left with it, where perftest's server would count it among the QPs it
// takes and fail on the next attempt's last.
func (c *cmConnector) tryClientConnection(r *runCtx) error {
	if c.ch == nil {
		c.ch = c.cm.NewEventChannel()
	}
	if err := c.connectIDs(r, 1); err != nil {
		return err
	}
	return c.connectIDs(r, r.p.NumQPs-1)
}

// connectIDs resolves n IDs, then follows the events
// (rdma_cm_connect_events): each resolved route gets its QP
// (create_qp_main) and connects; done when all n are established.
func (c *cmConnector) connectIDs(r *runCtx, n int) error {
	for i := 0; i < n; i++ {
		id, err := c.cm.CreateID(c.ch, rdmacm.PortSpaceTCP)
		if err != nil {
			return fmt.Errorf("rdma_create_id: %w", err)
		}
		c.ids = append(c.ids, id)
		if err := id.ResolveAddr(netip.Addr{}, c.peer.Server, cmResolveTimeout); err != nil {
			return fmt.Errorf("rdma_resolve_addr %v: %w", c.peer.Server, err)
		}
	}
	for left := n; left > 0; {
		ev, err := waitCMEvent(r.ctx, c.ch, cmEventTimeout,
			rdmacm.EventAddrResolved, rdmacm.EventRouteResolved, rdmacm.EventEstablished)
		if err != nil {
			return err
		}
		switch ev.Type {
		case rdmacm.EventAddrResolved:
			err = ev.ID.ResolveRoute(cmResolveTimeout)
		case rdmacm.EventRouteResolved:
			err = c.connectID(r, ev.ID)
		case rdmacm.EventEstablished:
			c.up = append(c.up, ev.ID)
			left--
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// connectID is rdma_cm_route_handler: the QP on the ID, then rdma_connect.
func (c *cmConnector) connectID(r *runCtx, id *rdmacm.ID) error {
	if _, err := c.createQP(r, id); err != nil {
		return err
	}
	if err := id.Connect(testConnParam(r.p)); err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	return nil
}

// createQP creates a test QP on id (rdma_create_qp), in r.qps order.
func (c *cmConnector) createQP(r *runCtx, id *rdmacm.ID) (*verbs.QP, error) {
	if id.Device() != r.dev.Verbs {
		return nil, fmt.Errorf("rdma_cm routed a test QP to another device than %s", r.dev.Name)
	}
	qp, err := id.CreateQP(r.pd, r.qpInitAttr())
	if err != nil {
		return nil, fmt.Errorf("rdma_create_qp: %w", err)
	}
	r.qps = append(r.qps, qp)
	return qp, nil
}

// serverConnection is rdma_cm_server_connection once it listens on the
// port (backlog: the QPs): accept as many requests as QPs, rejecting any
// more; the caller then stops listening. Each accepted RC QP gets perftest's min RNR timer.
// perftest goes on once it accepted; this side also waits until every
// connection is established, so its QPs can send. A client whose attempt
// failed halfway (its first request came before this side listened)
// disconnects what was accepted of it and tries again: such connections
// are dropped and their places freed for the next attempt.
func (c *cmConnector) serverConnection(r *runCtx) error {
	n := r.p.NumQPs
	for len(c.ids) < n || len(c.up) < n {
		ev, err := waitCMEvent(r.ctx, c.ch, cmEventTimeout, rdmacm.EventConnectRequest, rdmacm.EventEstablished,
			rdmacm.EventDisconnected, rdmacm.EventRejected, rdmacm.EventUnreachable, rdmacm.EventConnectError,
			rdmacm.EventTimewaitExit)
		if err != nil {
			return err
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			if len(c.ids) == n {
				ev.ID.Reject(nil)
			} else if err := c.accept(r, ev.ID); err != nil {
				return err
			}
		case rdmacm.EventEstablished:
			if c.index(ev.ID) >= 0 {
				c.up = append(c.up, ev.ID)
			}
		case rdmacm.EventTimewaitExit:
			// of a connection dropped already
		default:
			c.drop(r, ev.ID)
		}
	}
	return nil
}

// index returns where id is in c.ids and r.qps, -1 if not there.
func (c *cmConnector) index(id *rdmacm.ID) int {
	for i, x := range c.ids {
		if x == id {
			return i
		}
	}
	return -1
}

// drop destroys an accepted connection that ended before the test and
// forgets it.
func (c *cmConnector) drop(r *runCtx, id *rdmacm.ID) {
	i := c.index(id)
	if i < 0 {
		return
	}
	id.Destroy()
	c.ids = append(c.ids[:i], c.ids[i+1:]...)
	r.qps = append(r.qps[:i], r.qps[i+1:]...)
	for j, x := range c.up {
		if x == id {
			c.up = append(c.up[:j], c.up[j+1:]...)
			break
		}
	}
}

// accept is rdma_cm_connection_request_handler for one request.
func (c *cmConnector) accept(r *runCtx, id *rdmacm.ID) error {
	qp, err := c.createQP(r, id)
	if err != nil {
		id.Reject(nil)
		id.Destroy()
		return err
	}
	c.ids = append(c.ids, id)
	if err := id.Accept(testConnParam(r.p)); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if err := qp.Modify(&verbs.QPAttr{MinRNRTimer: minRNRTimer}, verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("QP %#x min RNR timer: %w", qp.QPN(), err)
	}
	return nil
}

// release is the rdma_cm part of destroy_ctx: disconnect every test
// connection and wait for their DISCONNECTED events (perftest's client
// does; its server disconnects its last one and destroys the IDs, which
// disconnects the others), then destroy the QPs and IDs.
func (c *cmConnector) release(r *runCtx) {
	c.disconnect()
	c.destroy(r)
}

func (c *cmConnector) disconnect() {
	if len(c.up) == 0 {
		return
	}
	pending := make(map[*rdmacm.ID]bool, len(c.up))
	for _, id := range c.up {
		pending[id] = true
		// An ID the peer disconnected first refuses; its event comes all
		// the same.
		id.Disconnect()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmDisconnectTimeout)
	defer cancel()
	for len(pending) > 0 {
		ev, err := c.ch.Get(ctx)
		if err != nil {
			return
		}
		if ev.Type == rdmacm.EventDisconnected {
			delete(pending, ev.ID)
		}
	}
}

// destroy destroys the test QPs and IDs and the event channel.
func (c *cmConnector) destroy(r *runCtx) {
	for _, id := range c.ids {
		if id.QP() != nil {
			id.DestroyQP()
		}
		id.Destroy()
	}
	r.qps, c.ids, c.up = nil, nil, nil
	if c.ch != nil {
		c.ch.Close()
		c.ch = nil
	}
}
