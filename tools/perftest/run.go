package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/softnic/softnic/internal/cpupin"
	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/verbs"
)

// LatencyLinger is how long a timed latency run keeps its QP after the
// test, for a slower peer's last messages.
var LatencyLinger = time.Second

// Connect makes the out-of-band TCP connection of a run as perftest
// does: a server (p.Server) prints the waiting banner and accepts on
// p.Port, all IPv4 addresses; a client dials host (IPv4), retrying for up
// to wait while the server is not listening yet.
func Connect(ctx context.Context, p *Params, host string, wait time.Duration, out io.Writer) (net.Conn, error) {
	if !p.Server {
		return oob.Dial(ctx, "tcp4", host, p.Port, wait)
	}
	PrintWaiting(out, p)
	return oob.Accept(ctx, "tcp4", p.Port, "accept")
}

// Run runs one perftest test on dev over conn, an established out-of-band
// TCP connection (the client dialled, the server accepted), printing to
// out what the perftest program prints. p is adjusted as perftest adjusts
// its parameters (defaults, the negotiated MTU).
func Run(ctx context.Context, dev Device, conn net.Conn, p Params, out io.Writer) error {
	if err := p.prepare(dev, out); err != nil {
		return err
	}
	// The end of ctx (a signal) ends the exchanges with the peer as well:
	// one that stopped answering held the last of them for the session's
	// 30-minute limit (a stalled rxe guest's peer, signalled in vain).
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	sess := oob.NewSession(conn, p.role(), 0)
	return runSession(ctx, dev, sess, p, out, ethernetConnector{})
}

// prepare completes p as perftest's parser and check_link do.
func (p *Params) prepare(dev Device, out io.Writer) error {
	if err := p.Finish(); err != nil {
		return err
	}
	return p.resolveDevice(dev, out)
}

func (p *Params) role() oob.Role {
	if p.Server {
		return oob.Server
	}
	return oob.Client
}

// qpConnector is the step of a run that creates the test QPs and brings
// them to RTS, the one that differs between perftest's modes: over the
// Ethernet exchange ctx_init creates them and ctx_connect connects them
// with the peer's keys; with -R create_rdma_cm_connection does both
// through rdma_cm, before any keys are exchanged.
type qpConnector interface {
	// createQPs fills r.qps, once the buffer and CQs exist.
	createQPs(r *runCtx) error
	// connectQPs runs where perftest calls ctx_connect, with the peer's
	// keys for each QP.
	connectQPs(r *runCtx, remote []oob.PerftestDest) error
	// release tears the QPs' connections down before r closes.
	release(r *runCtx)
}

// ethernetConnector is the default mode's qpConnector.
type ethernetConnector struct{}

func (ethernetConnector) createQPs(r *runCtx) error { return r.createQPs() }

func (ethernetConnector) connectQPs(r *runCtx, remote []oob.PerftestDest) error {
	return r.connect(remote, r.mtu)
}

func (ethernetConnector) release(*runCtx) {}

// runSession is a run after the exchange is up: the negotiation, the
// resources, the test sequence and its report.
func runSession(ctx context.Context, dev Device, sess *oob.Session, p Params, out io.Writer, qc qpConnector) error {
	neg, err := sess.Setup(oob.PerftestVersion, oob.SysData{CycleBuffer: pageSize(), CacheLineSize: DefCacheLine}, oob.MTUEnum(p.MTU))
	if err != nil {
		return err
	}
	p.MTU = oob.MTUBytes(neg.MTU)

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &runCtx{p: &p, dev: dev, ctx: rctx, out: out, sizes: p.Sizes(), mtu: verbs.MTU(neg.MTU),
		cycle: uint64(neg.SysData.CycleBuffer), cacheLine: uint64(max(neg.SysData.CacheLineSize, 1))}
	defer r.close()
	if err := r.allocate(); err != nil {
		return err
	}
	defer qc.release(r)
	if err := qc.createQPs(r); err != nil {
		return err
	}
	r.setUpConnection()
	PrintTestInfo(out, &p)
	run := sess.Run
	if p.Duplex {
		run = sess.RunDuplex
	}
	if p.StallTimeout > 0 {
		defer r.watch(cancel, p.StallTimeout)()
	}
	if _, err := run(p.Test, r.local, len(r.sizes), r.hooks(qc)); err != nil {
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

// resolveDevice fills in what comes from the device: its name, the
// default GID index (set_up_connection without -x: get_best_gid_index) and
// the path MTU, checked against the port's active MTU as perftest checks
// -m, with its messages.
func (p *Params) resolveDevice(dev Device, out io.Writer) error {
	if p.Device == "" {
		p.Device = dev.Name
	}
	if p.GIDIndex < 0 {
		p.GIDIndex = BestGIDIndex(dev.Verbs.GIDTable(), p.IPv6)
	}
	if err := CheckGIDIndex(dev, p.Device, p.GIDIndex); err != nil {
		return err
	}
	gid, _ := dev.Verbs.GID(p.GIDIndex)
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
	return nil
}

// hooks are the points where the out-of-band sequence hands the run back
// to this side's QPs.
func (r *runCtx) hooks(qc qpConnector) oob.Hooks {
	p, out := r.p, r.out
	return oob.Hooks{
		Connect:   func(remote []oob.PerftestDest) error { return qc.connectQPs(r, remote) },
		Connected: r.printConnected,
		Prepare: func(round int) error {
			if p.Test == oob.SendLat || (p.Test == oob.SendBW && (p.Server || p.Duplex)) {
				return r.postRecvs(r.sizes[round])
			}
			return nil
		},
		Measure: r.measure,
		ServerReport: func(rep oob.BWReport) error {
			PrintBWReport(out, p, rep)
			return nil
		},
		DuplexReport: func(mine, theirs oob.BWReport) error {
			PrintDuplexBWReport(out, p, mine, theirs)
			if p.ReportBoth && !p.RunAll {
				PrintReportBoth(out, p, mine, theirs)
			}
			return nil
		},
	}
}

// printConnected prints both sides' keys and the table header, where
// perftest prints them once the QPs are connected.
func (r *runCtx) printConnected(remote []oob.PerftestDest) error {
	p, out := r.p, r.out
	for _, d := range r.local {
		PrintDest(out, p, "local", d)
	}
	for _, d := range remote {
		PrintDest(out, p, "remote", d)
	}
	switch {
	case p.Test.IsBW():
		PrintBWHeader(out, p)
	case p.Test == oob.ReadLat && p.Server:
	default:
		PrintLatHeader(out, p)
	}
	return nil
}

// measure runs round round of the test on this side and prints its line;
// a bandwidth test returns its report for the peer.
func (r *runCtx) measure(round int) (oob.BWReport, error) {
	size := r.sizes[round]
	if r.p.Test.IsBW() {
		return r.measureBW(size)
	}
	return oob.BWReport{}, r.measureLat(size)
}

// bwLoop picks the bandwidth loop this side runs.
func (r *runCtx) bwLoop() func(uint64) (BWTimes, error) {
	switch p := r.p; {
	case p.Test == oob.SendBW && p.Duplex:
		return r.runBi
	case p.Test == oob.SendBW && p.Server:
		return r.runBWServer
	}
	return r.runBW
}

func (r *runCtx) measureBW(size uint64) (oob.BWReport, error) {
	p := r.p
	r.startPin()
	defer r.stopPin()
	t, err := r.bwLoop()(size)
	if err != nil {
		return oob.BWReport{}, err
	}
	n := int(p.Iters) * p.NumQPs
	if t.Messages > 0 || p.Duration > 0 {
		n = int(t.Messages)
	}
	rep := BWReport(p, size, n, t)
	if !p.Duplex {
		PrintBWReport(r.out, p, rep)
	}
	return rep, nil
}

// latLoops are the latency tests' loops, by iterations and for a
// duration.
var latLoops = map[oob.Test]struct {
	iters    func(*runCtx, uint64) ([]int64, error)
	duration func(*runCtx, uint64) (BWTimes, error)
}{
	oob.WriteLat: {(*runCtx).runLatWrite, (*runCtx).runLatWriteDuration},
	oob.ReadLat:  {(*runCtx).runLatRead, (*runCtx).runLatReadDuration},
	oob.SendLat:  {(*runCtx).runLatSend, (*runCtx).runLatSendDuration},
}

// startPin keeps the calling goroutine's thread on one CPU while it polls,
// as poll-mode drivers do (package cpupin says why): the CPU of the
// interrupts and engine of the first QP, following them when the QP moves
// to another engine. Where the engine has no such CPU (veth) the thread
// stays free: pinned where it happened to run, both ends of a same-host
// test can share a CPU (write_lat 8.6 µs instead of 4.1 on the host),
// and a run is over before a contested pin gives up.
func (r *runCtx) startPin() {
	dev, qp := r.dev.Verbs.RoCE(), r.qps[0]
	if dev == nil {
		return // the daemon's engines run in another process
	}
	cpu := func() int { return dev.EngineCPU(qp.EngineIndex()) }
	c := cpu()
	if c < 0 {
		return
	}
	r.pin = cpupin.StartOn(c)
	r.pin.Follow(cpu)
}

func (r *runCtx) stopPin() {
	r.pin.Stop()
	r.pin = nil
}

func (r *runCtx) measureLat(size uint64) error {
	p, loops := r.p, latLoops[r.p.Test]
	r.startPin()
	defer r.stopPin()
	if p.Duration > 0 {
		t, err := loops.duration(r, size)
		if err != nil {
			return err
		}
		PrintLatDurReport(r.out, p, LatencyDurationReport(p, size, t))
		return nil
	}
	posted, err := loops.iters(r, size)
	if err != nil {
		return err
	}
	PrintLatReport(r.out, p, LatencyReport(p, size, posted))
	return nil
}
