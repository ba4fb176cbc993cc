package rping

import (
	"context"

	"github.com/softnic/softnic/rdmacm"
)

// serve runs one connection (rping_run_server after the request, or
// rping_persistent_server_thread): QP, buffers, a receive, accept, the
// test loop, disconnect. Only the one-connection server reports a failed
// loop, as rping.
func (srv *server) serve(ctx context.Context, conn *serverConn) error {
	defer srv.forget(conn)
	defer conn.life.cancel()
	log := srv.log
	s := newSession(srv.cfg, log, conn.life, stateConnectRequest)
	defer func() {
		s.freeBuffers()
		conn.id.Destroy() // and its QP
	}()
	if err := s.prepare(conn.id.Device(), conn.id.CreateQP); err != nil {
		return err
	}
	if err := srv.accept(ctx, conn); err != nil {
		if ctx.Err() == nil {
			log.errorf("connect error %d\n", -1)
		}
		return err
	}
	err := s.testServer()
	if err != nil && !srv.cfg.Persistent && conn.life.ctx.Err() == nil {
		log.errorf("rping server failed: %d\n", -1)
	}
	conn.id.Disconnect()
	if err != nil {
		return loopFailure(err)
	}
	return nil
}

// accept is rping_accept: accept, then wait for the connection to be
// established.
func (srv *server) accept(ctx context.Context, conn *serverConn) error {
	srv.log.debugf("accepting client connection request\n")
	maxRd := conn.id.Device().Query().MaxQPRdAtom
	if err := conn.id.Accept(acceptParam(srv.cfg, conn.param, maxRd)); err != nil {
		srv.log.errorf("rdma_accept: %v\n", err)
		return failed(err.Error())
	}
	select {
	case <-conn.established:
		return nil
	case <-conn.life.ctx.Done():
		if conn.life.disconnected.Load() {
			return nil // the loop sees the disconnect at once
		}
		return interrupted(ctx.Err())
	}
}

// cmThread is rping's CM thread for the server: it handles every event of
// the listening ID and its connections until the run ends. An error event
// ends the run, as rping's exit() from that thread.
func (srv *server) cmThread(ctx context.Context) {
	for {
		ev, err := srv.ch.Get(ctx)
		if err != nil {
			return
		}
		srv.log.logEvent(ev, srv.listen)
		switch {
		case ev.Type == rdmacm.EventConnectRequest:
			srv.request(ctx, ev)
		case ev.Type == rdmacm.EventEstablished:
			srv.log.debugf("ESTABLISHED\n")
			if conn := srv.lookup(ev.ID); conn != nil {
				select {
				case conn.established <- struct{}{}:
				default:
				}
			}
		case ev.Type == rdmacm.EventDisconnected:
			srv.log.errorf("server DISCONNECT EVENT...\n")
			if conn := srv.lookup(ev.ID); conn != nil {
				conn.life.disconnect()
			}
		case isErrorEvent(ev.Type):
			srv.die(srv.log.reportError(ev))
			return
		default:
			srv.log.errorf("unhandled event: %s, ignoring\n", ev.Type)
		}
	}
}

// request hands a connect request to the serving goroutine. rping's
// one-connection server never takes a second request (its CM thread
// blocks on it for good); this one rejects it, so that the client hears
// at once.
func (srv *server) request(ctx context.Context, ev rdmacm.Event) {
	conn := &serverConn{id: ev.ID, param: ev.Param, life: newLifetime(ctx), established: make(chan struct{}, 1)}
	srv.mu.Lock()
	take := srv.cfg.Persistent || srv.taken == 0
	if take {
		srv.taken++
		srv.conns[ev.ID] = conn
	}
	srv.mu.Unlock()
	if !take {
		conn.life.cancel()
		ev.ID.Reject(nil)
		ev.ID.Destroy()
		return
	}
	srv.log.debugf("child cma %p\n", ev.ID)
	select {
	case srv.requests <- conn:
	case <-ctx.Done():
	}
}
