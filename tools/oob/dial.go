package oob

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Dial connects to the server of an exchange at host:port on network
// ("tcp4" as perftest's client, "tcp" as ibv_rc_pingpong's AF_UNSPEC
// lookup), retrying for up to wait while the server is not listening yet:
// a script may start both sides at once.
func Dial(ctx context.Context, network, host string, port int, wait time.Duration) (net.Conn, error) {
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	deadline := time.Now().Add(wait)
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Accept listens on port of network ("tcp4": all IPv4 addresses, as
// perftest's server; "tcp": IPv6 and IPv4, as ibv_rc_pingpong's) and
// returns the first connection; ending ctx ends the wait. The error of a
// failed accept starts with acceptFailed: each tool words it its own way.
func Accept(ctx context.Context, network string, port int, acceptFailed string) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, network, fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", acceptFailed, err)
	}
	return c, nil
}
