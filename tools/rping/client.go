package rping

import (
	"context"
	"net/netip"
	"time"

	"github.com/softnic/softnic/rdmacm"
)

// disconnectWait bounds how long the client waits for the CM to confirm
// its disconnect, to print rping's "client DISCONNECT EVENT..." line; rping
// does not wait at all, but its teardown usually outlasts the DREP.
const disconnectWait = 500 * time.Millisecond

// client is rping's client: its CM ID and the state its CM events set.
type client struct {
	cfg   *Config
	log   *logger
	ch    *rdmacm.EventChannel
	id    *rdmacm.ID
	state state
}

// runClient is rping_run_client.
func runClient(ctx context.Context, cm *rdmacm.CM, cfg *Config, log *logger) error {
	c := &client{cfg: cfg, log: log, ch: cm.NewEventChannel(), state: stateIdle}
	defer c.ch.Close()
	var err error
	if c.id, err = cm.CreateID(c.ch, rdmacm.PortSpaceTCP); err != nil {
		log.errorf("rdma_create_id: %v\n", err)
		return failed(err.Error())
	}
	log.debugf("created cm_id %p\n", c.id)
	defer func() {
		log.debugf("destroy cm_id %p\n", c.id)
		c.id.Destroy()
	}()
	if err := c.bind(ctx); err != nil {
		return err
	}
	life := newLifetime(ctx)
	defer life.cancel()
	s := newSession(cfg, log, life, c.state)
	defer s.freeBuffers()
	if err := s.prepare(c.id.Device(), c.id.CreateQP); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		if ctx.Err() == nil {
			log.errorf("connect error %d\n", -1)
		}
		return err
	}
	s.state = c.state
	return c.ping(s)
}

// bind is rping_bind_client: resolve the server's address (from -I's
// source if given) and the route, 2 s each.
func (c *client) bind(ctx context.Context) error {
	dst := netip.AddrPortFrom(c.cfg.Addr, c.cfg.Port)
	if err := c.id.ResolveAddr(c.cfg.Source, dst, resolveTimeout); err != nil {
		c.log.errorf("%s", perror("rdma_resolve_addr", err))
		return failed(err.Error())
	}
	return c.await(ctx, stateRouteResolved, "waiting for addr/route resolution state %d\n",
		"address and route not resolved", "rdma_resolve_addr - rdma_resolve_route successful\n")
}

// connect is rping_connect_client.
func (c *client) connect(ctx context.Context) error {
	if err := c.id.Connect(connParam()); err != nil {
		c.log.errorf("rdma_connect: %v\n", err)
		return failed(err.Error())
	}
	return c.await(ctx, stateConnected, "wait for CONNECTED state %d\n", "not connected", "rdma_connect successful\n")
}

// await waits for the CM event that wakes rping's main thread and checks it
// brought state want, logging as rping does: complaint (with the state
// reached) when it did not, success (with -d) when it did.
func (c *client) await(ctx context.Context, want state, complaint, what, success string) error {
	fatal := c.waitEvent(ctx)
	if ctx.Err() != nil {
		return fatal
	}
	if c.state != want {
		c.log.errorf(complaint, c.state)
		if fatal == nil {
			fatal = failed("rping: " + what)
		}
		return fatal
	}
	c.log.debugf("%s", success)
	return fatal
}

// waitEvent handles CM events as rping's CM thread does until one wakes
// the main thread (rping's sem_post): the route resolved, the connection
// established, or an error, which is fatal and returned.
func (c *client) waitEvent(ctx context.Context) error {
	for {
		ev, err := c.ch.Get(ctx)
		if err != nil {
			return interrupted(err)
		}
		c.log.logEvent(ev, c.id)
		switch {
		case ev.Type == rdmacm.EventAddrResolved:
			c.state = stateAddrResolved
			if err := c.id.ResolveRoute(resolveTimeout); err != nil {
				c.state = stateError
				c.log.errorf("rdma_resolve_route: %v\n", err)
				return nil
			}
		case ev.Type == rdmacm.EventRouteResolved:
			c.state = stateRouteResolved
			return nil
		case ev.Type == rdmacm.EventEstablished:
			c.log.debugf("ESTABLISHED\n")
			c.state = stateConnected
			return nil
		case isErrorEvent(ev.Type):
			return c.log.reportError(ev)
		case ev.Type == rdmacm.EventDisconnected:
			c.log.errorf("client DISCONNECT EVENT...\n")
			c.state = stateDisconnected
			return nil
		default:
			c.log.errorf("unhandled event: %s, ignoring\n", ev.Type)
		}
	}
}

// ping runs the pings while a goroutine watches the CM for the server's
// disconnect, then disconnects (rping_test_client, rping_disconnect).
func (c *client) ping(s *session) error {
	watch := make(chan error, 1)
	go func() { watch <- c.watch(s.life) }()
	err := s.testClient()
	if err != nil && s.life.ctx.Err() == nil {
		c.log.errorf("rping client failed: %d\n", -1)
	}
	c.id.Disconnect()
	timer := time.AfterFunc(disconnectWait, s.life.cancel)
	defer timer.Stop()
	return clientResult(err, <-watch)
}

// clientResult is the client's end: an error event's failure, else the
// loop's (which already counts a disconnect by the server as success, as
// rping). The disconnect the client itself asked for after a failed loop
// does not make the failure a success.
func clientResult(loopErr, fatal error) error {
	switch {
	case fatal != nil:
		return fatal
	case loopErr != nil:
		return loopFailure(loopErr)
	}
	return nil
}

// watch is the CM thread while the client pings: a disconnect ends the
// loop (and the wait after the client's own disconnect), an error event
// the run.
func (c *client) watch(life *lifetime) error {
	for {
		ev, err := c.ch.Get(life.ctx)
		if err != nil {
			return nil
		}
		c.log.logEvent(ev, c.id)
		switch {
		case ev.Type == rdmacm.EventDisconnected:
			c.log.errorf("client DISCONNECT EVENT...\n")
			life.disconnect()
			return nil
		case isErrorEvent(ev.Type):
			fatal := c.log.reportError(ev)
			life.cancel()
			return fatal
		default:
			c.log.errorf("unhandled event: %s, ignoring\n", ev.Type)
		}
	}
}
