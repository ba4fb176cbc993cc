package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/softnic/softnic/internal/oob"
	"github.com/softnic/softnic/internal/perftest"
	"github.com/softnic/softnic/verbs"
)

func init() {
	register("pingpong", "ibv_rc_pingpong-compatible RC ping-pong (server without a host)", runPingpongCmd)
}

// pingpongConfig holds ibv_rc_pingpong's options (rc_pingpong.c main).
type pingpongConfig struct {
	host     string
	port     int
	size     int
	mtu      int // bytes
	rxDepth  int
	iters    int
	sl       int
	gidIndex int
	// validate is rc_pingpong's -c: the client marks the first byte of
	// every page, the server checks the marks arrived.
	validate bool
	// events is rc_pingpong's -e: sleep until a completion event instead
	// of busy-polling the CQ (the default).
	events bool
	// stats prints the engine's and the link's counters after the run.
	stats bool
	// connectWait is how long the client retries connecting.
	connectWait time.Duration
}

// Work request IDs of rc_pingpong.c.
const (
	pingpongRecvWRID = 1
	pingpongSendWRID = 2
)

const pingpongUsage = `usage:
  softnic pingpong -d IFACE [flags]          start a server and wait for connection
  softnic pingpong -d IFACE [flags] HOST     connect to server at HOST

Either side may be rdma-core's ibv_rc_pingpong. -d names the network
interface softnic runs on; -g the GID index in its GID table (give the real
tool -g too: RoCE needs GIDs).

flags:
`

func runPingpongCmd(args []string, stdout, stderr io.Writer) int {
	cfg := pingpongConfig{port: oob.DefaultPort, size: 4096, mtu: 1024, rxDepth: 500, iters: 1000, gidIndex: -1}
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := flagSet{fs}
	var ifname string
	ibPort := 1
	f.intVar(&cfg.port, "p", "port", cfg.port, "listen on/connect to port")
	f.stringVar(&ifname, "d", "ib-dev", "", "network interface softnic runs on (required)")
	f.intVar(&ibPort, "i", "ib-port", 1, "port of the device (softnic devices have port 1)")
	f.intVar(&cfg.size, "s", "size", cfg.size, "size of message to exchange")
	f.intVar(&cfg.mtu, "m", "mtu", cfg.mtu, "path MTU")
	f.intVar(&cfg.rxDepth, "r", "rx-depth", cfg.rxDepth, "number of receives to post at a time")
	f.intVar(&cfg.iters, "n", "iters", cfg.iters, "number of exchanges")
	f.intVar(&cfg.sl, "l", "sl", 0, "service level (no meaning on RoCE; accepted)")
	f.intVar(&cfg.gidIndex, "g", "gid-idx", -1, "local port GID index (default: the first IPv4 GID)")
	f.boolVar(&cfg.validate, "c", "chk", "validate received buffer")
	f.boolVar(&cfg.events, "e", "events", "sleep on CQ events (default poll)")
	f.BoolVar(&cfg.stats, "softnic-stats", false, "softnic: after the run, print the engine's counters (retransmissions, timeouts, RNR NAKs...) and the XDP link's ring statistics")
	f.DurationVar(&cfg.connectWait, "connect-wait", dialWait, "softnic: how long a client retries while the server is not listening")
	fs.Usage = func() {
		fmt.Fprint(stderr, pingpongUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "softnic pingpong: "+format+"\n", a...)
		return 1
	}
	switch {
	case len(pos) > 1:
		fs.Usage()
		return 1
	case ifname == "":
		return fail("-d INTERFACE is required")
	case ibPort != 1:
		return fail("softnic devices have one port (1), not %d", ibPort)
	case cfg.port < 0 || cfg.port > 65535:
		return fail("port %d out of range", cfg.port)
	case oob.MTUEnum(cfg.mtu) == 0:
		return fail("MTU %d is not one of 256, 512, 1024, 2048, 4096", cfg.mtu)
	case cfg.size < 1 || cfg.rxDepth < 2 || cfg.iters < 1:
		return fail("size, rx-depth (at least 2) and iters must be positive")
	}
	if len(pos) == 1 {
		cfg.host = pos[0]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dev, closeDev, err := openDevice(ifname, 0)
	if err != nil {
		return fail("%v", err)
	}
	defer closeDev()
	err = runPingpong(ctx, dev, cfg, stdout)
	if cfg.stats {
		// Also after a failed run: the counters tell how it failed.
		printSoftnicStats(stdout, dev.Verbs)
	}
	if err != nil {
		return fail("%v", err)
	}
	return 0
}

// pingpongCtx is rc_pingpong.c's struct pingpong_context.
type pingpongCtx struct {
	dev  perftest.Device
	cfg  pingpongConfig
	mr   *verbs.MR
	ch   *verbs.CompChannel // with -e
	cq   *verbs.CQ
	qp   *verbs.QP
	sge  []verbs.SGE
	gidx int
}

func (c *pingpongCtx) postRecv(n int) int {
	wr := verbs.RecvWR{ID: pingpongRecvWRID, SGL: c.sge}
	for i := 0; i < n; i++ {
		if c.qp.PostRecv(&wr) != nil {
			return i
		}
	}
	return n
}

// postSend posts the one send. It retries while the send queue is full:
// the engine may publish a send's completion a moment before it frees the
// queue slot (reported to the engine owner).
func (c *pingpongCtx) postSend(ctx context.Context) error {
	wr := verbs.SendWR{ID: pingpongSendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: c.sge}
	for {
		err := c.qp.PostSend(&wr)
		if !errors.Is(err, verbs.ErrQueueFull) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		runtime.Gosched()
	}
}

// completions returns the next completions as rc_pingpong's loop gets
// them: by default it busy-polls the CQ until there is one; with -e it
// sleeps until the CQ's completion event, re-arms the CQ and polls once,
// which may find nothing.
//
// Busy polling is also the shorter round trip: a goroutine asleep on the
// completion channel needs the engine goroutine to wake it through the Go
// scheduler, twice per iteration. Over a veth pair with 8-byte messages -e
// measured 30-38µs per iteration and polling 17-23µs (-e was 170-177µs
// before the engine's idle spin ran the goroutines it readied).
func (c *pingpongCtx) completions(ctx context.Context, wcs []verbs.WC) (int, error) {
	if !c.cfg.events {
		for i := 0; ; i++ {
			n, err := c.cq.Poll(wcs)
			if n > 0 || err != nil {
				if err != nil {
					return 0, fmt.Errorf("poll CQ failed: %w", err)
				}
				return n, nil
			}
			if i&63 == 63 && ctx.Err() != nil {
				return 0, fmt.Errorf("poll CQ failed: %w", ctx.Err())
			}
			yieldCPU()
		}
	}
	cq, err := c.ch.Get(ctx)
	if err != nil {
		return 0, fmt.Errorf("Failed to get cq_event: %w", err)
	}
	if cq != c.cq {
		return 0, fmt.Errorf("CQ event for unknown CQ %p", cq)
	}
	if err := c.cq.RequestNotify(false); err != nil {
		return 0, fmt.Errorf("Couldn't request CQ notification: %w", err)
	}
	n, err := c.cq.Poll(wcs)
	if err != nil {
		return 0, fmt.Errorf("poll CQ failed: %w", err)
	}
	return n, nil
}

// yieldCPU gives the CPU to another runnable thread (sched_yield) between
// polls. The engines of both ends run in threads of their own that need
// the CPU to answer; a poller that never left it would make them wait for
// the kernel scheduler's time slice (milliseconds per iteration on two
// cores, measured).
func yieldCPU() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// connect is pp_connect_ctx: RTR with the peer's QPN and PSN (GRH hop
// limit 1, as the tool sets), then RTS with timeout 14 and infinite
// retries.
func (c *pingpongCtx) connect(myPSN uint32, rem oob.PingpongDest) error {
	var zero [8]byte
	if [8]byte(rem.GID[8:]) == zero {
		return errors.New("the peer sent no GID (interface ID zero); RoCE needs one: give ibv_rc_pingpong -g")
	}
	peer := netip.AddrFrom16(rem.GID).Unmap()
	if c.dev.Resolve != nil {
		if err := c.dev.Resolve(peer); err != nil {
			return fmt.Errorf("resolve %v: %w", peer, err)
		}
	}
	mtu := oob.MTUEnum(c.cfg.mtu)
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU(mtu), DestQPN: rem.QPN,
		RQPSN: verbs.PSN(rem.PSN), MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AV: verbs.AddressVector{DGID: rem.GID, SGIDIndex: uint8(c.gidx), HopLimit: 1}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		SQPSN: verbs.PSN(myPSN), MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|
			verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// runPingpong is rc_pingpong.c's main after option parsing, on dev.
func runPingpong(ctx context.Context, dev perftest.Device, cfg pingpongConfig, out io.Writer) error {
	c := &pingpongCtx{dev: dev, cfg: cfg, gidx: cfg.gidIndex}
	if c.gidx < 0 {
		// ibv_rc_pingpong would send no GID, which RoCE cannot use;
		// softnic picks the first IPv4 GID as perftest does.
		c.gidx = perftest.BestGIDIndex(dev.Verbs.GIDTable(), false)
	}
	pd := dev.Verbs.AllocPD()
	buf := make([]byte, cfg.size)
	for i := range buf {
		buf[i] = 0x7b // rc_pingpong fills its buffer with 0x7b
	}
	var err error
	if c.mr, err = pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	defer c.mr.Dereg()
	if cfg.events {
		c.ch = dev.Verbs.NewCompChannel()
	}
	if c.cq, err = dev.Verbs.CreateCQ(cfg.rxDepth+1, c.ch); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	if c.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: cfg.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	defer c.qp.Destroy()
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	c.sge = []verbs.SGE{c.mr.SGE(0, cfg.size)}
	routs := c.postRecv(cfg.rxDepth)
	if routs < cfg.rxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", routs)
	}
	if cfg.events {
		if err := c.cq.RequestNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}

	gid, err := dev.Verbs.GID(c.gidx)
	if err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", c.gidx, err)
	}
	my := oob.PingpongDest{QPN: c.qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid}
	fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my.LID, my.QPN, my.PSN, oob.GIDText(my.GID))

	var rem oob.PingpongDest
	if cfg.host != "" {
		conn, err := perftest.DialNetwork(ctx, "tcp", cfg.host, cfg.port, cfg.connectWait)
		if err != nil {
			return err
		}
		rem, err = oob.PingpongClient(conn, my, 0)
		conn.Close()
		if err != nil {
			return fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
	} else {
		conn, err := acceptAny(ctx, cfg.port)
		if err != nil {
			return err
		}
		rem, err = oob.PingpongServer(conn, my, func(r oob.PingpongDest) error { return c.connect(my.PSN, r) }, 0)
		conn.Close()
		if err != nil {
			return fmt.Errorf("Couldn't connect to remote QP: %w", err)
		}
	}
	fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.LID, rem.QPN, rem.PSN, oob.GIDText(rem.GID))
	if cfg.host != "" {
		if err := c.connect(my.PSN, rem); err != nil {
			return err
		}
	}

	pending := pingpongRecvWRID
	if cfg.host != "" {
		if cfg.validate {
			// As rdma-core 44: the first byte of each page becomes 0
			// (i / page_size % sizeof(char)) in a buffer of 0x7b.
			for i := 0; i < len(buf); i += os.Getpagesize() {
				buf[i] = 0
			}
		}
		if err := c.postSend(ctx); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
		pending |= pingpongSendWRID
	}
	start := time.Now()
	var rcnt, scnt int
	wcs := make([]verbs.WC, 2)
	for rcnt < cfg.iters || scnt < cfg.iters {
		n, err := c.completions(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("Failed status %v (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			switch wc.WRID {
			case pingpongSendWRID:
				scnt++
			case pingpongRecvWRID:
				if routs--; routs <= 1 {
					routs += c.postRecv(cfg.rxDepth - routs)
					if routs < cfg.rxDepth {
						return fmt.Errorf("Couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", wc.WRID)
			}
			pending &^= int(wc.WRID)
			if scnt < cfg.iters && pending == 0 {
				if err := c.postSend(ctx); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = pingpongRecvWRID | pingpongSendWRID
			}
		}
	}
	// rc_pingpong computes in float microseconds.
	usec := float32(time.Since(start).Microseconds())
	bytes := int64(cfg.size) * int64(cfg.iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", cfg.iters, usec/1e6, usec/float32(cfg.iters))
	if cfg.host == "" && cfg.validate {
		if bad := invalidPages(buf); len(bad) > 0 {
			for _, page := range bad {
				fmt.Fprintf(out, "invalid data in page %d\n", page)
			}
			return fmt.Errorf("received data failed validation in %d of %d pages", len(bad), (len(buf)+os.Getpagesize()-1)/os.Getpagesize())
		}
	}
	return nil
}

// invalidPages returns the pages of buf whose first byte is not the 0 the
// client of a -c run writes there (rc_pingpong's check).
func invalidPages(buf []byte) []int {
	var bad []int
	for i := 0; i < len(buf); i += os.Getpagesize() {
		if buf[i] != 0 {
			bad = append(bad, i/os.Getpagesize())
		}
	}
	return bad
}

// acceptAny listens like rc_pingpong's server (AF_UNSPEC passive: IPv6
// and IPv4) and returns the first connection.
func acceptAny(ctx context.Context, port int) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return conn, nil
}
