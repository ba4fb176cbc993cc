package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/softnic/softnic/tools/pingpong"
)

func init() {
	register("pingpong", "ibv_rc_pingpong-compatible RC ping-pong, or ibv_ud_pingpong's with --ud, ibv_uc_pingpong's with --uc (server without a host)", runPingpongCmd)
}

const pingpongUsage = `usage:
  softnic pingpong -d IFACE [flags]          start a server and wait for connection
  softnic pingpong -d IFACE [flags] HOST     connect to server at HOST

Either side may be rdma-core's ibv_rc_pingpong, or with --ud its
ibv_ud_pingpong (messages of at most the port's active MTU, 1024 bytes by
default, as that tool sends), or with --uc its ibv_uc_pingpong (UC QPs;
a lost message stalls the run, as it does the real tool). -d names the network
interface softnic runs on; -g the GID index in its GID table (give the real
tool -g too: RoCE needs GIDs).

flags:
`

// pingpongFlags are softnic pingpong's flags: ibv_rc_pingpong's and
// softnic's own.
type pingpongFlags struct {
	cfg    pingpong.Config
	ifname string
	ibPort int
	stats  bool
}

func (o *pingpongFlags) define(f flagSet) {
	cfg := &o.cfg
	f.intVar(&cfg.Port, "p", "port", cfg.Port, "listen on/connect to port")
	f.stringVar(&o.ifname, "d", "ib-dev", "", "network interface softnic runs on (required)")
	f.intVar(&o.ibPort, "i", "ib-port", 1, "port of the device (softnic devices have port 1)")
	f.intVar(&cfg.Size, "s", "size", cfg.Size, "size of message to exchange")
	f.intVar(&cfg.MTU, "m", "mtu", cfg.MTU, "path MTU")
	f.intVar(&cfg.RxDepth, "r", "rx-depth", cfg.RxDepth, "number of receives to post at a time")
	f.intVar(&cfg.Iters, "n", "iters", cfg.Iters, "number of exchanges")
	f.intVar(&cfg.SL, "l", "sl", 0, "service level (no meaning on RoCE; accepted)")
	f.intVar(&cfg.GIDIndex, "g", "gid-idx", -1, "local port GID index (default: the first IPv4 GID)")
	f.boolVar(&cfg.Validate, "c", "chk", "validate received buffer")
	f.boolVar(&cfg.Events, "e", "events", "sleep on CQ events (default poll)")
	f.boolVar(&cfg.Timestamps, "t", "ts", "get CQE with timestamp")
	f.BoolVar(&o.stats, "softnic-stats", false, "softnic: after the run, print the engine's counters (retransmissions, timeouts, RNR NAKs...) and the XDP link's ring statistics")
	f.BoolVar(&keepIRQs, "softnic-keep-irqs", false, keepIRQsUsage)
	defineBindMode(f.FlagSet, "softnic-xdp-bind")
	f.DurationVar(&cfg.ConnectWait, "connect-wait", dialWait, "softnic: how long a client retries while the server is not listening")
	f.BoolVar(&cfg.UD, "ud", false, "softnic: be ibv_ud_pingpong (UD QPs) instead of ibv_rc_pingpong")
	f.BoolVar(&cfg.UC, "uc", false, "softnic: be ibv_uc_pingpong (UC QPs) instead of ibv_rc_pingpong")
	capture.define(f.FlagSet)
}

func runPingpongCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := pingpongFlags{cfg: pingpong.DefaultConfig()}
	o.define(flagSet{fs})
	fs.Usage = func() {
		fmt.Fprint(stderr, pingpongUsage)
		printFlags(stderr, fs)
	}
	pos, status, ok := parseArgs(fs, args, 1)
	if !ok {
		return status
	}
	if o.cfg.UD && !flagGiven(fs, "s", "size") {
		o.cfg.Size = pingpong.UDDefaultSize
	}
	fail := failer(stderr, "pingpong")
	switch {
	case len(pos) > 1:
		fs.Usage()
		return 1
	case o.ifname == "":
		return fail("-d INTERFACE is required")
	case o.ibPort != 1:
		return fail("softnic devices have one port (1), not %d", o.ibPort)
	}
	if err := o.cfg.Check(); err != nil {
		return fail("%v", err)
	}
	if err := capture.check(); err != nil {
		return fail("%v", err)
	}
	if len(pos) == 1 {
		o.cfg.Host = pos[0]
	}
	ctx, stop := signalContext()
	defer stop()
	return endStatus(ctx, o.run(ctx, stdout, stderr), stderr, "pingpong")
}

// run opens the device and runs the ping-pong on it until done or ctx
// ends; how the sockets bound goes to stderr, as softnic perf's.
func (o *pingpongFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	dev, closeDev, err := openDevice(o.ifname, 0)
	if err != nil {
		return err
	}
	defer closeDev()
	printBind(stderr, o.ifname, dev.Verbs)
	err = pingpong.Run(ctx, dev, o.cfg, stdout)
	if o.stats {
		// Also after a failed run: the counters tell how it failed.
		printSoftnicStats(stdout, dev.Verbs)
	}
	return err
}

// flagGiven reports whether one of names was set on the command line.
func flagGiven(fs *flag.FlagSet, names ...string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			given = given || f.Name == n
		}
	})
	return given
}
