package rping

import (
	"context"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/rdmacm"
)

// server is rping's server: the listening ID, and the CM thread that
// hands connect requests to the serving goroutine and tells each
// connection of its disconnect.
type server struct {
	cfg      *Config
	log      *logger
	ch       *rdmacm.EventChannel
	listen   *rdmacm.ID
	requests chan *serverConn
	cancel   context.CancelFunc // ends the run

	mu    sync.Mutex
	conns map[*rdmacm.ID]*serverConn
	taken int   // connect requests handed on
	fatal error // an error event's, which ended the run
}

// serverConn is one connection of the server, known to the CM thread by
// its ID.
type serverConn struct {
	id          *rdmacm.ID
	param       rdmacm.ConnParam // the client's
	life        *lifetime
	established chan struct{}
}

// runServer is rping_run_server, or rping_run_persistent_server with -P.
func runServer(ctx context.Context, cm *rdmacm.CM, cfg *Config, log *logger) error {
	srv := &server{cfg: cfg, log: log, ch: cm.NewEventChannel(), requests: make(chan *serverConn, listenBacklog),
		conns: map[*rdmacm.ID]*serverConn{}}
	var err error
	if srv.listen, err = cm.CreateID(srv.ch, rdmacm.PortSpaceTCP); err != nil {
		log.errorf("rdma_create_id: %v\n", err)
		return failed(err.Error())
	}
	log.debugf("created cm_id %p\n", srv.listen)
	ctx, srv.cancel = context.WithCancel(ctx)
	var cmThread sync.WaitGroup
	defer func() {
		srv.cancel()
		log.debugf("destroy cm_id %p\n", srv.listen)
		srv.listen.Destroy()
		srv.ch.Close()
		cmThread.Wait()
	}()
	if err := srv.bind(); err != nil {
		return err
	}
	cmThread.Add(1)
	go func() {
		defer cmThread.Done()
		srv.cmThread(ctx)
	}()
	if cfg.Persistent {
		err = srv.servePersistent(ctx)
	} else {
		err = srv.serveOne(ctx)
	}
	return srv.fatalOr(err)
}

// serveOne serves the first connection.
func (srv *server) serveOne(ctx context.Context) error {
	conn, err := srv.nextRequest(ctx)
	if err != nil {
		return err
	}
	return srv.serve(ctx, conn)
}

// fatalOr returns the error event's failure if one ended the run, else
// err.
func (srv *server) fatalOr(err error) error {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.fatal != nil {
		return srv.fatal
	}
	return err
}

// die ends the run on an error event, as rping's CM thread exits.
func (srv *server) die(err error) {
	srv.mu.Lock()
	srv.fatal = err
	srv.mu.Unlock()
	srv.cancel()
}

// lookup returns the connection of id.
func (srv *server) lookup(id *rdmacm.ID) *serverConn {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.conns[id]
}

// forget drops a connection that is over.
func (srv *server) forget(conn *serverConn) {
	srv.mu.Lock()
	delete(srv.conns, conn.id)
	srv.mu.Unlock()
}

// bind is rping_bind_server: bind to -a's address (any without it) and
// rping's port, listen with a backlog of 3.
func (srv *server) bind() error {
	addr := srv.cfg.Addr
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	if err := srv.listen.Bind(netip.AddrPortFrom(addr, srv.cfg.Port)); err != nil {
		srv.log.errorf("rdma_bind_addr: %v\n", err)
		return failed(err.Error())
	}
	srv.log.debugf("rdma_bind_addr successful\n")
	srv.log.debugf("rdma_listen\n")
	if err := srv.listen.Listen(listenBacklog); err != nil {
		srv.log.errorf("rdma_listen: %v\n", err)
		return failed(err.Error())
	}
	return nil
}

// nextRequest waits for the CM thread's next connect request.
func (srv *server) nextRequest(ctx context.Context) (*serverConn, error) {
	select {
	case conn := <-srv.requests:
		return conn, nil
	case <-ctx.Done():
		return nil, interrupted(ctx.Err())
	}
}

// servePersistent serves each connection on a goroutine of its own until
// the run ends (rping -P runs until killed) or an error event kills it.
func (srv *server) servePersistent(ctx context.Context) error {
	var conns sync.WaitGroup
	defer conns.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait: it ends the connections' loops
	for {
		conn, err := srv.nextRequest(ctx)
		if err != nil {
			return err
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			srv.serve(ctx, conn)
		}()
	}
}
