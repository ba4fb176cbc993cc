// Command xdpblast measures the raw AF_XDP datapath between two network
// namespaces joined by a veth pair: an AF_XDP socket in one namespace sends
// UDP/4791 frames of a given size as fast as it can, softnic's XDP program
// in the other steers them into a second AF_XDP socket, which counts them.
// It prints frames/s and Gb/s at the receiver: the ceiling softnic's RDMA
// throughput is compared against.
//
// With -pingpong it measures the raw path's latency instead: both ends get
// the steering program and an AF_XDP socket, one sends a frame (by default
// the 82-byte frame of an 8-byte RDMA WRITE), the other sends it back as
// soon as it arrives, and it prints the median, 99th percentile, minimum,
// maximum and mean of half the round trip in microseconds: the latency
// ceiling softnic's write_lat is compared against.
//
// It needs root, creates its own namespaces and veth pair, and removes them
// on exit, also on SIGINT/SIGTERM.
//
//	xdpblast -size 64,1082,4158 -duration 3s [-queues 2] [-busy-poll] [-v]
//	xdpblast -pingpong [-size 82] [-rounds 5000] [-busy-poll] [-handoff] [-ack] [-v]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	sizes := flag.String("size", "64,1082,4158", "comma-separated Ethernet frame sizes (no FCS); 1082 = RoCEv2 with IB MTU 1024, 4158 = IB MTU 4096")
	duration := flag.Duration("duration", 3*time.Second, "sending time per size")
	count := flag.Int("count", 0, "send this many frames per size instead of for -duration")
	mtu := flag.Int("mtu", 0, "veth MTU (default: 1500, or 9000 when the frame needs it)")
	batch := flag.Int("batch", 64, "descriptors per ring operation")
	frames := flag.Int("frames", 4096, "UMEM frames per socket (power of two)")
	busy := flag.Bool("busy-poll", false, "enable preferred busy polling on both sockets")
	queues := flag.Int("queues", 1, "queue pairs: veth queues, each with a sending and a receiving socket and goroutine")
	verbose := flag.Bool("v", false, "print ring and program statistics")
	pingpong := flag.Bool("pingpong", false, "measure the round trip of one frame between two AF_XDP sockets instead of blasting (-size defaults to 82, an 8-byte RDMA WRITE)")
	rounds := flag.Int("rounds", 5000, "-pingpong: measured round trips per size, after a tenth as many to warm up")
	handOff := flag.Bool("handoff", false, "-pingpong experiment: each side an I/O thread and an application thread meeting through shared counters, like softnic's engine and perftest")
	ack := flag.Bool("ack", false, "-pingpong experiment: each side answers every ping-pong frame with a 62-byte ACK frame, sent with its own kick before the reply")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "xdpblast: needs root to create network namespaces, a veth pair, an XDP program and AF_XDP sockets")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *pingpong {
		sizeSet := false
		flag.Visit(func(f *flag.Flag) { sizeSet = sizeSet || f.Name == "size" })
		if !sizeSet {
			*sizes = strconv.Itoa(WriteLatFrame)
		}
		if !runPingPong(ctx, PingOptions{Count: *rounds, MTU: *mtu, BusyPoll: *busy, HandOff: *handOff, Ack: *ack}, *sizes, *verbose) {
			os.Exit(1)
		}
		return
	}

	fmt.Printf("%8s %6s %12s %14s %10s %10s\n", "size", "mtu", "sent", "received", "frames/s", "Gb/s")
	failed := false
	for _, f := range strings.Split(*sizes, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "xdpblast: bad size %q\n", f)
			os.Exit(2)
		}
		o := Options{Size: size, Duration: *duration, Count: *count, MTU: *mtu, Batch: *batch, Frames: *frames, BusyPoll: *busy, Queues: *queues}
		r, err := Run(ctx, o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "xdpblast: size %d: %v\n", size, err)
			failed = true
			continue
		}
		mtuShown := o.MTU
		if mtuShown == 0 {
			mtuShown = 1500
			if size-14 > 1500 {
				mtuShown = 9000
			}
		}
		fmt.Printf("%8d %6d %12d %14d %10.0f %10.2f\n", size, mtuShown, r.Sent, r.Received, r.FramesPerSecond(), r.Gbps())
		if *verbose {
			fmt.Printf("  sender   %+v\n  receiver %+v\n  program  %+v\n  veth dropped %d\n", r.SenderStats, r.ReceiverStats, r.Program, r.VethDropped)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if failed {
		os.Exit(1)
	}
}

// runPingPong measures the ping-pong of each size and prints one line per
// size; it reports whether all of them worked.
func runPingPong(ctx context.Context, base PingOptions, sizes string, verbose bool) bool {
	fmt.Printf("%8s %6s %8s %6s %10s %10s %10s %10s %10s\n", "size", "mtu", "rounds", "lost", "median_us", "p99_us", "min_us", "max_us", "avg_us")
	ok := true
	mtu := base.MTU
	if mtu == 0 {
		mtu = 1500
	}
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 }
	for _, f := range strings.Split(sizes, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "xdpblast: bad size %q\n", f)
			os.Exit(2)
		}
		o := base
		o.Size = size
		r, err := PingPong(ctx, o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "xdpblast: ping-pong of %d-byte frames: %v\n", size, err)
			ok = false
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fmt.Printf("%8d %6d %8d %6d %10.2f %10.2f %10.2f %10.2f %10.2f\n", size, mtu, r.Rounds, r.Lost,
			us(r.Median), us(r.P99), us(r.Min), us(r.Max), us(r.Mean))
		if verbose {
			fmt.Printf("  ping     %+v\n  pong     %+v\n  programs %+v %+v\n", r.PingStats, r.PongStats, r.PingProgram, r.PongProgram)
		}
	}
	return ok
}
