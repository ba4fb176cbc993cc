package main

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// bench-vm: softnic, its AF_XDP sockets bound in copy mode and in
// zero-copy, against Linux rdma_rxe on two identical qemu (TCG) guests on
// a bridge, the three taking turns on the same guests, once per guest
// shape (vCPUs, virtio-net queue pairs). The guests run Debian 13 with
// trixie-backports' kernel, whose virtio-net offers zero-copy AF_XDP.

// vmConfig is one guest shape; both guests get it.
type vmConfig struct {
	cpus, queues int
}

func (c vmConfig) label() string {
	cpus := "1 vCPU"
	if c.cpus > 1 {
		cpus = fmt.Sprintf("%d vCPUs", c.cpus)
	}
	if c.queues == 1 {
		return cpus + ", 1 queue pair"
	}
	return fmt.Sprintf("%s, %d queue pairs", cpus, c.queues)
}

func (c vmConfig) key() string { return fmt.Sprintf("%dcpu%dq", c.cpus, c.queues) }

// parseVMConfigs reads "1:2,2:4": vCPUs:queue pairs, comma-separated.
func parseVMConfigs(s string) ([]vmConfig, error) {
	var cs []vmConfig
	for _, f := range strings.Split(s, ",") {
		cpus, queues, ok := strings.Cut(strings.TrimSpace(f), ":")
		c, err1 := strconv.Atoi(cpus)
		q, err2 := strconv.Atoi(queues)
		if !ok || err1 != nil || err2 != nil || c < 1 || q < 1 {
			return nil, fmt.Errorf("bad guest shape %q: want vCPUs:queues, e.g. 1:2", f)
		}
		cs = append(cs, vmConfig{cpus: c, queues: q})
	}
	return cs, nil
}

// vmOptions are bench-vm's settings.
type vmOptions struct {
	configs                      []vmConfig
	rounds                       int
	bwIters, latIters, rateIters int
	runTimeout                   time.Duration // one tool run in a guest
	memMiB                       int
	cache                        string
	logDir                       string // the guests' whole output, per shape (empty: not kept)
	kernelArgs                   string // added to both guests' kernel command line
	softnicFlags                 string // added to softnic's runs, with a leading space
	softnicEnv                   string // NAME=value ... for softnic's runs (experiments)
	queuesHelper                 string // bench/vmqueues, static
}

var vmTests = []*vmTest{
	{key: "write_bw", name: "write_bw 64 KiB", unit: unitMBps, tool: "write_bw", size: 64 << 10,
		itersFlag: func(o vmOptions) int { return o.bwIters }, resultFrom: vmBandwidth},
	{key: "write_lat", name: "write_lat 8 B, t_typical", unit: unitUsec, lower: true, tool: "write_lat", size: 8,
		itersFlag: func(o vmOptions) int { return o.latIters }, resultFrom: vmLatency},
	{key: "msgrate", name: "write_bw 64 B message rate", unit: unitMpps, tool: "write_bw", size: 64,
		itersFlag: func(o vmOptions) int { return o.rateIters }, resultFrom: vmMsgRate},
}

// vmBandwidth reads a bandwidth report in MB/sec, as perftest 4.5 (and
// softnic) labels its unit of 2^20 bytes, or MiB/sec, as trixie's perftest
// labels the same unit; not one in Gb/sec.
func vmBandwidth(out string) (float64, error) {
	if !strings.Contains(out, "BW average[MB/sec]") && !strings.Contains(out, "BW average[MiB/sec]") {
		return 0, errors.New("no bandwidth report in MB/sec")
	}
	r, err := parseBW(out)
	return positive(r.Avg, err)
}

func vmMsgRate(out string) (float64, error) {
	r, err := parseBW(out)
	return positive(r.MsgRate, err)
}

func vmLatency(out string) (float64, error) {
	r, err := parseLat(out)
	return positive(r.Typical, err)
}

// positive refuses a figure of zero or less: perftest prints zeros when
// it could not calibrate its cycle counter in the guest ("Correlation
// coefficient r^2 < 0.9"), and one such run made a ratio infinite.
func positive(v float64, err error) (float64, error) {
	if err == nil && !(v > 0) {
		err = fmt.Errorf("the report gives %v", v)
	}
	return v, err
}

const (
	vmServerIP = "10.77.0.11"
	vmClientIP = "10.77.0.12"
)

// vmRun is what one guest shape produced: each step's section of both
// guests' output, keyed by step index.
type vmRun struct {
	cfg            vmConfig
	steps          []vmStep
	server, client map[int]string
	serverEnd      string // after the last step: virtio_net's messages
	clientEnd      string
	took           time.Duration
	err            error  // the run as a whole failed (no guest output)
	logs           string // where the guests' whole output went
}

// runVMConfig boots the two guests with cfg and runs the
// implementations' steps (vmImpls).
func runVMConfig(ctx context.Context, img *rxeguest.Image, programs map[string][]byte, cfg vmConfig, o vmOptions) *vmRun {
	steps := vmSteps(vmTests, vmImpls, o.rounds)
	run := &vmRun{cfg: cfg, steps: steps}
	start := time.Now()
	defer func() { run.took = time.Since(start) }()
	limit := time.Duration(len(steps)+2) * o.runTimeout
	ctx, cancel := context.WithTimeout(ctx, limit+time.Minute)
	defer cancel()
	if err := rxeguest.SweepNetworks("benchvm"); err != nil {
		run.err = err
		return run
	}
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("benchvm%d", os.Getpid()), Taps: 2, TapQueues: cfg.queues})
	if err != nil {
		run.err = err
		return run
	}
	defer n.Close()
	guest := func(name string, tap int, addr string, server bool) (*rxeguest.Guest, error) {
		return rxeguest.Start(ctx, img, rxeguest.Config{
			Name: name, NetNS: n.BridgeNS, Tap: n.Taps[tap], Addr: netip.MustParsePrefix(addr + "/24"),
			Script: vmScript(steps, o, server, vmServerIP), ScriptTimeout: limit,
			// nokaslr: virtio_net (a module) DMA-maps its zero-copy
			// transmit header from module memory; under KASLR that
			// header's page is a random one, at times RAM holding
			// other data, and the host then drops every zero-copy
			// frame. Without KASLR it lies just past 1 GiB, past the
			// RAM of guests of -vm-mem 1024 or less, and reads as zeros.
			MemoryMiB: o.memMiB, CPUs: cfg.cpus, Queues: cfg.queues, KernelArgs: strings.TrimSpace("nokaslr " + o.kernelArgs),
			// Zero-copy needs it (rxeguest.Config); the other runs get
			// it too, so that all run on the same device.
			AccessPlatform: true,
			Programs:       programs,
		})
	}
	server, err := guest("vmserver", 0, vmServerIP, true)
	if err != nil {
		run.err = err
		return run
	}
	client, err := guest("vmclient", 1, vmClientIP, false)
	if err != nil {
		cancel()
		server.Wait()
		run.err = err
		return run
	}
	c, s := waitBoth(client.Wait, server.Wait, o.runTimeout, cancel)
	run.server, run.serverEnd = vmSections(s.res)
	run.client, run.clientEnd = vmSections(c.res)
	run.logs = vmKeepLogs(o.logDir, cfg, s.res, c.res)
	run.err = errors.Join(guestErr("server", s.res, s.err), guestErr("client", c.res, c.err))
	return run
}

// guestEnd is how a guest ended (rxeguest.Guest.Wait).
type guestEnd struct {
	res *rxeguest.Result
	err error
}

// waitBoth waits for both guests (their Wait). Once one has ended, the other gets
// grace to end too, then stop (cancel, which ends both guests' context):
// a guest whose kernel died (rdma_rxe's crash after a stalled virtio-net
// queue, seen in a run) otherwise left its peer's steps each waiting for
// their own timeout, half an hour in all.
func waitBoth(a, b func() (*rxeguest.Result, error), grace time.Duration, stop func()) (aEnd, bEnd guestEnd) {
	ach, bch := make(chan guestEnd, 1), make(chan guestEnd, 1)
	for _, g := range []struct {
		wait func() (*rxeguest.Result, error)
		ch   chan guestEnd
	}{{a, ach}, {b, bch}} {
		go func() {
			res, err := g.wait()
			g.ch <- guestEnd{res, err}
		}()
	}
	select {
	case aEnd = <-ach:
		bEnd = waitOrStop(bch, grace, stop)
	case bEnd = <-bch:
		aEnd = waitOrStop(ach, grace, stop)
	}
	return aEnd, bEnd
}

// waitOrStop waits for ch up to grace, then calls stop and waits on.
func waitOrStop(ch chan guestEnd, grace time.Duration, stop func()) guestEnd {
	select {
	case end := <-ch:
		return end
	case <-time.After(grace):
		stop()
		return <-ch
	}
}

// guestErr says how a guest failed, if it did.
func guestErr(who string, res *rxeguest.Result, err error) error {
	if err != nil {
		return fmt.Errorf("%s guest: %w", who, err)
	}
	if res.ExitStatus != 0 {
		return fmt.Errorf("%s guest: script exit status %d: %s", who, res.ExitStatus, lastLine(res.Output))
	}
	return nil
}

var stepRE = regexp.MustCompile(`(?m)^@@ (step (\d+) .*|end)$`)

// vmSections splits a guest's output at the step markers.
func vmSections(res *rxeguest.Result) (map[int]string, string) {
	secs := map[int]string{}
	if res == nil {
		return secs, ""
	}
	out := res.Output
	marks := stepRE.FindAllStringSubmatchIndex(out, -1)
	end := ""
	for i, m := range marks {
		stop := len(out)
		if i+1 < len(marks) {
			stop = marks[i+1][0]
		}
		body := out[m[1]:stop]
		if m[4] < 0 {
			end = body
			continue
		}
		idx, _ := strconv.Atoi(out[m[4]:m[5]])
		secs[idx] = body
	}
	return secs, end
}

// requireStatic refuses a dynamically linked binary: the guest's
// libraries are Debian 13's, not the host's, and a static build
// (CGO_ENABLED=0) needs none of them.
func requireStatic(path string) ([]byte, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("guest program: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", path)
		}
	}
	return os.ReadFile(path)
}

// vmKeepLogs writes both guests' whole output and console under dir and
// returns where, or why not.
func vmKeepLogs(dir string, cfg vmConfig, results ...*rxeguest.Result) string {
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err.Error()
	}
	var errs []error
	for i, who := range []string{"server", "client"} {
		if results[i] == nil {
			continue
		}
		base := filepath.Join(dir, cfg.key()+"-"+who)
		errs = append(errs, os.WriteFile(base+".out", []byte(results[i].Output), 0o644),
			os.WriteFile(base+".console", []byte(results[i].Console), 0o644))
	}
	if err := errors.Join(errs...); err != nil {
		return err.Error()
	}
	return filepath.Join(dir, cfg.key()+"-*")
}
