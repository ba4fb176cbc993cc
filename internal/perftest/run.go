package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/softnic/softnic/internal/oob"
	"github.com/softnic/softnic/verbs"
)

// LatencyLinger is how long a timed latency run keeps its QP after the
// test, for a slower peer's last messages.
var LatencyLinger = time.Second

// Run runs one perftest test on dev over conn, an established out-of-band
// TCP connection (the client dialled, the server accepted), printing to
// out what the perftest program prints. p is adjusted as perftest adjusts
// its parameters (defaults, the negotiated MTU).
func Run(ctx context.Context, dev Device, conn net.Conn, p Params, out io.Writer) error {
	if err := p.Finish(); err != nil {
		return err
	}
	if p.Device == "" {
		p.Device = dev.Name
	}
	if p.GIDIndex < 0 {
		// set_up_connection without -x: get_best_gid_index.
		p.GIDIndex = BestGIDIndex(dev.Verbs.GIDTable(), p.IPv6)
	}
	gid, err := dev.Verbs.GID(p.GIDIndex)
	if err != nil {
		return fmt.Errorf("GID index %d: %w", p.GIDIndex, err)
	}
	active := ActiveMTU(dev.LinkMTU, !netip.AddrFrom16(gid).Unmap().Is4())
	if active == 0 {
		return fmt.Errorf("link MTU %d too small for RoCE", dev.LinkMTU)
	}
	switch {
	case p.MTU == 0:
		p.MTU = active
	case oob.MTUEnum(p.MTU) == 0:
		fmt.Fprintf(out, " Invalid MTU - %d \n Please choose mtu from {256,512,1024,2048,4096}\n Will run with the port active mtu - %d\n", p.MTU, oob.MTUEnum(active))
		p.MTU = active
	case p.MTU > active:
		fmt.Fprintf(out, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", oob.MTUEnum(active))
		p.MTU = active
	}

	role := oob.Client
	if p.Server {
		role = oob.Server
	}
	sess := oob.NewSession(conn, role, 0)
	neg, err := sess.Setup(oob.PerftestVersion, oob.SysData{CycleBuffer: pageSize(), CacheLineSize: DefCacheLine}, oob.MTUEnum(p.MTU))
	if err != nil {
		return err
	}
	p.MTU = oob.MTUBytes(neg.MTU)

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &runCtx{p: &p, dev: dev, ctx: rctx, cycle: uint64(neg.SysData.CycleBuffer), cacheLine: uint64(max(neg.SysData.CacheLineSize, 1))}
	defer r.close()
	if err := r.setup(); err != nil {
		return err
	}
	PrintTestInfo(out, &p)

	sizes := p.Sizes()
	h := oob.Hooks{
		Connect: func(remote []oob.PerftestDest) error { return r.connect(remote, verbs.MTU(neg.MTU)) },
		Connected: func(remote []oob.PerftestDest) error {
			for _, d := range r.local {
				PrintDest(out, &p, "local", d)
			}
			for _, d := range remote {
				PrintDest(out, &p, "remote", d)
			}
			switch {
			case p.Test.IsBW():
				PrintBWHeader(out, &p)
			case p.Test == oob.ReadLat && p.Server:
			default:
				PrintLatHeader(out, &p)
			}
			return nil
		},
		Prepare: func(round int) error {
			if p.Test == oob.SendLat || (p.Test == oob.SendBW && (p.Server || p.Duplex)) {
				return r.postRecvs(sizes[round])
			}
			return nil
		},
		Measure: func(round int) (oob.BWReport, error) {
			size := sizes[round]
			if p.Test.IsBW() {
				var t BWTimes
				var err error
				switch {
				case p.Test == oob.SendBW && p.Duplex:
					t, err = r.runBi(size)
				case p.Test == oob.SendBW && p.Server:
					t, err = r.runBWServer(size)
				default:
					t, err = r.runBW(size)
				}
				if err != nil {
					return oob.BWReport{}, err
				}
				n := int(p.Iters) * p.NumQPs
				if t.Messages > 0 || p.Duration > 0 {
					n = int(t.Messages)
				}
				rep := BWReport(&p, size, n, t)
				if !p.Duplex {
					PrintBWReport(out, &p, rep)
				}
				return rep, nil
			}
			if p.Duration > 0 {
				var t BWTimes
				var err error
				switch p.Test {
				case oob.WriteLat:
					t, err = r.runLatWriteDuration(size)
				case oob.ReadLat:
					t, err = r.runLatReadDuration(size)
				case oob.SendLat:
					t, err = r.runLatSendDuration(size)
				}
				if err != nil {
					return oob.BWReport{}, err
				}
				PrintLatDurReport(out, &p, LatencyDurationReport(&p, size, t))
				return oob.BWReport{}, nil
			}
			var posted []int64
			var err error
			switch p.Test {
			case oob.WriteLat:
				posted, err = r.runLatWrite(size)
			case oob.ReadLat:
				posted, err = r.runLatRead(size)
			case oob.SendLat:
				posted, err = r.runLatSend(size)
			}
			if err != nil {
				return oob.BWReport{}, err
			}
			PrintLatReport(out, &p, LatencyReport(&p, size, posted))
			return oob.BWReport{}, nil
		},
		ServerReport: func(rep oob.BWReport) error {
			PrintBWReport(out, &p, rep)
			return nil
		},
		DuplexReport: func(mine, theirs oob.BWReport) error {
			PrintDuplexBWReport(out, &p, mine, theirs)
			if p.ReportBoth && !p.RunAll {
				PrintReportBoth(out, &p, mine, theirs)
			}
			return nil
		},
	}
	run := sess.Run
	if p.Duplex {
		run = sess.RunDuplex
	}
	if p.StallTimeout > 0 {
		defer r.watch(cancel, p.StallTimeout)()
	}
	if _, err := run(p.Test, r.local, len(sizes), h); err != nil {
		return err
	}
	if p.Duration > 0 && !p.Test.IsBW() {
		// Each side of a timed ping-pong stops on its own clock; a peer
		// that lags may still send its answer to our last message, and
		// perftest waits for that message's acknowledgement without a
		// time limit. Keep the QP up a moment to acknowledge it.
		time.Sleep(LatencyLinger)
	}
	PrintEnd(out, &p)
	return nil
}

// Dial connects to a perftest server the way perftest's client does
// (ethernet_client_connect: IPv4 TCP), retrying for up to wait while the
// server is not listening yet.
func Dial(ctx context.Context, host string, port int, wait time.Duration) (net.Conn, error) {
	return DialNetwork(ctx, "tcp4", host, port, wait)
}

// DialNetwork is Dial on another network ("tcp" lets ibv_rc_pingpong's
// counterpart reach IPv6 hosts, as the tool's AF_UNSPEC lookup does).
func DialNetwork(ctx context.Context, network, host string, port int, wait time.Duration) (net.Conn, error) {
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

// Accept listens on port (all IPv4 addresses, like perftest's server)
// and returns the first connection. ready, if not nil, is called once the
// socket listens, with its address.
func Accept(ctx context.Context, port int, ready func(net.Addr)) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp4", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	defer ln.Close()
	if ready != nil {
		ready(ln.Addr())
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	return c, nil
}
