package main

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// Each round's blocks come in a rotated order: over three rounds each
// implementation takes each place once.
func TestVMStepsRotate(t *testing.T) {
	steps := vmSteps(vmTests, vmImpls, 3)
	require.Len(t, steps, 3*3*len(vmTests))
	var order []string
	places := map[string][]int{}
	for i, st := range steps {
		require.Equal(t, i, st.index)
		if i%len(vmTests) == 0 {
			order = append(order, fmt.Sprintf("%d%s", st.round, st.impl.key))
			places[st.impl.key] = append(places[st.impl.key], i/len(vmTests)%3)
		}
	}
	assert.Equal(t, []string{"1rxe", "1copy", "1zerocopy", "2copy", "2zerocopy", "2rxe", "3zerocopy", "3rxe", "3copy"}, order)
	for key, p := range places {
		assert.ElementsMatchf(t, []int{0, 1, 2}, p, "%s's places in its rounds", key)
	}
	assert.Equal(t, vmBasePort+5, steps[5].port())
}

func TestVMScript(t *testing.T) {
	o := vmOptions{rounds: 1, bwIters: 400, latIters: 500, rateIters: 4000, runTimeout: 90 * time.Second, softnicFlags: " --softnic-stats"}
	steps := vmSteps(vmTests, vmImpls, 1)
	o.softnicEnv = "GOMAXPROCS=1"
	server := vmScript(steps, o, true, vmServerIP)
	client := vmScript(steps, o, false, vmServerIP)
	for _, want := range []string{"@@ step 0 rxe write_bw 1'\nrxe_on", "timeout -s TERM $RUN_TIMEOUT ib_write_bw -d rxe0 -x 1 -m 1024 -F -s 65536 -n 400 -p 18600 2>&1",
		"@@ step 4 copy write_lat 1'\nrxe_off", "vmqueues eth0 ||", "@@ step 7 zerocopy write_lat 1'\nrxe_off", "SOFTNIC_ENV='GOMAXPROCS=1'\n",
		"run_softnic perf write_lat -d eth0 -x 1 -m 1024 -F -s 8 -n 500 -p 18604 --softnic-xdp-bind copy --softnic-stats ||",
		"run_softnic perf write_lat -d eth0 -x 1 -m 1024 -F -s 8 -n 500 -p 18607 --softnic-xdp-bind zerocopy --softnic-stats ||"} {
		assert.Contains(t, server, want)
	}
	for _, want := range []string{"retry_tool ib_write_bw -d rxe0 -x 1 -m 1024 -F -s 64 -n 4000 -p 18602 10.77.0.11",
		"run_softnic perf write_bw -d eth0 -x 1 -m 1024 -F -s 65536 -n 400 -p 18603 --softnic-xdp-bind copy --softnic-stats --connect-wait=90s 10.77.0.11",
		"run_softnic perf write_bw -d eth0 -x 1 -m 1024 -F -s 65536 -n 400 -p 18606 --softnic-xdp-bind zerocopy --softnic-stats --connect-wait=90s 10.77.0.11"} {
		assert.Contains(t, client, want)
	}
}

const vmBW = "CPU-BEFORE: cpu  100 0 50 1000 0 0 10 0 0 0\n" +
	" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
	" 65536      400              0.00               %s   \t\t   0.000300\n" +
	"CPU-AFTER: cpu  200 0 100 1100 0 0 60 0 0 0\n"

const (
	vmBindCopy = "softnic: eth0: AF_XDP bind copy, XDP generic, 1 queues\n"
	vmBindZC   = "softnic: eth0: AF_XDP bind zero-copy, XDP native, 1 queues\n"
)

// vmTestRun fakes a one-shape run of one round, all three implementations:
// write_bw rxe 20 MB/s, copy 10, zero-copy 30; both softnic modes' latency
// runs failed (zero-copy's server before its sockets bound); neither mode's
// message-rate step ran.
func vmTestRun() *vmRun {
	r := &vmRun{cfg: vmConfig{cpus: 1, queues: 2}, steps: vmSteps(vmTests, vmImpls, 1),
		server: map[int]string{}, client: map[int]string{}, took: time.Minute}
	r.client[0] = fmt.Sprintf(vmBW, "20.00")
	r.client[1] = "latency output\n"
	r.client[3] = fmt.Sprintf(vmBW, "10.00") + " softnic engine counters:\n  RxPackets                    460\n  Timeouts                     18\n  Forwarded                    460\n"
	r.server[3] = "XDP-MODE: xdpgeneric\n" + vmBindCopy
	r.client[4] = "softnic perf: boom\n!! FAILED\n"
	r.server[4] = "XDP-MODE: xdp\n"
	r.server[5] = "softnic perf: no XDP yet\n"
	r.client[6] = vmBindZC + fmt.Sprintf(vmBW, "30.00") + " softnic engine counters:\n  RxPackets                    900\n  Timeouts                     0\n  Forwarded                    5\n"
	r.server[6] = vmBindZC + "XDP-MODE: xdp\n"
	r.client[7] = "softnic perf: the server went away\n!! FAILED\n"
	r.server[7] = "softnic perf: open AF_XDP link on eth0: zero-copy refused\n!! FAILED\n"
	r.serverEnd = "[    5.1] virtio_net virtio0 eth0: XDP request 2 queues but max is 1.\n"
	return r
}

func TestVMFiguresAndTable(t *testing.T) {
	s := &suite{started: time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)}
	o := vmOptions{configs: []vmConfig{{1, 2}}, rounds: 1, bwIters: 400, memMiB: 1024}
	s.look = vmLook(o.configs)
	run := vmTestRun()
	s.vmFigures(run, 1)
	bw := s.res.Get("zerocopy/1cpu2q/write_bw")
	require.NotNil(t, bw)
	assert.Equal(t, 30.0, bw.Value)
	for _, c := range []struct {
		a, b string
		want float64
	}{{"copy", "rxe", 0.5}, {"zerocopy", "rxe", 1.5}, {"zerocopy", "copy", 3}} {
		r, ok := s.res.Ratio(c.a+"/1cpu2q/write_bw", c.b+"/1cpu2q/write_bw")
		assert.True(t, ok)
		assert.Equalf(t, c.want, r, "%s ÷ %s", c.a, c.b)
	}
	assert.NotEmpty(t, s.res.Get("rxe/1cpu2q/write_lat").Err, "rxe latency output without a report")
	assert.Contains(t, s.res.Get("copy/1cpu2q/write_lat").Err, "boom")
	assert.Contains(t, s.res.Get("zerocopy/1cpu2q/write_lat").Err, "zero-copy refused")
	assert.Contains(t, s.res.Get("copy/1cpu2q/msgrate").Err, "never reached step 5")
	assert.Contains(t, s.res.Get("zerocopy/1cpu2q/msgrate").Err, "never reached step 8")
	assert.Equal(t, "none ×1, xdp (native) ×1, xdpgeneric ×1", vmXDPModes(run.server, run.steps, vmCopy))
	assert.Equal(t, "none ×1, xdp (native) ×1", vmXDPModes(run.server, run.steps, vmZeroCopy))

	md := s.vmMarkdown([]*vmRun{run}, o, "6.16.12+deb13-amd64", time.Minute)
	for _, want := range []string{
		"| 1 vCPU, 2 queue pairs | write_bw 64 KiB | 20.0 MB/s | 10.0 MB/s | 30.0 MB/s | 0.50 | 1.50 | 3.00 | 20.0; 10.0; 30.0 |",
		"| 1 vCPU, 2 queue pairs | softnic copy | none ×1, xdp (native) ×1, xdpgeneric ×1 | none ×2 | copy ×1, none ×2 | none ×2 | 1m0s |",
		"| 1 vCPU, 2 queue pairs | softnic zero-copy | none ×1, xdp (native) ×1 | none ×2 | none ×1, zero-copy ×1 | none ×1, zero-copy ×1 |  |",
		"| write_bw 64 KiB, softnic copy ≥ 1.0 × rxe, 1 vCPU, 2 queue pairs | 0.50 × | **no** |",
		"| write_bw 64 KiB, softnic zero-copy ≥ 1.0 × rxe, 1 vCPU, 2 queue pairs | 1.50 × | yes |",
		"| 1 vCPU, 2 queue pairs | write_bw 64 KiB | softnic copy | — | user 33%, sys 17%, softirq 17%, idle 33% |",
		"XDP request 2 queues but max is 1.", "trixie-backports' kernel (6.16.12+deb13-amd64;",
		"| 1 vCPU, 2 queue pairs | write_bw 64 KiB | softnic copy | 18 | 460 | 460 |",
		"| 1 vCPU, 2 queue pairs | write_bw 64 KiB | softnic zero-copy | 0 | 5 | 900 |",
		"| 1 vCPU, 2 queue pairs | write_bw 64 B message rate | softnic copy | — | — | — |"} {
		assert.Contains(t, md, want)
	}
	img, err := s.chart()
	require.NoError(t, err)
	_, err = png.Decode(bytes.NewReader(img))
	require.NoError(t, err)
}

// The bind line softnic perf prints (cmd/softnic's bindLine) gives the
// mode as the kernel granted it, a partial zero-copy bind included; a run
// without it (softnic failed before binding) counts as none.
func TestVMBinds(t *testing.T) {
	steps := vmSteps(vmTests, vmImpls, 1)
	secs := map[int]string{
		6: "XDP-MODE: xdp\nsoftnic: eth0: AF_XDP bind zero-copy on 1 of 2 queues, XDP native, 2 queues\n",
		7: vmBindZC + "result\n",
		8: "softnic perf: zero-copy refused\n",
		3: vmBindCopy,
	}
	assert.Equal(t, "none ×1, zero-copy on 1 of 2 queues ×1, zero-copy ×1", vmBinds(secs, steps, vmZeroCopy))
	assert.Equal(t, "copy ×1", vmBinds(secs, steps, vmCopy))
	assert.Equal(t, "not run", vmBinds(secs, steps, vmRxe))
	assert.Nil(t, vmBindRE.FindStringSubmatch("  softnic: eth0: AF_XDP bind copy, XDP native, 2 queues"), "only a line of its own")
}

func TestVMSections(t *testing.T) {
	out := "boot noise\n@@ step 0 rxe write_bw 1\nzero\n@@ step 1 softnic write_bw 1\none\ntwo\n@@ end\nmsgs\n"
	secs, end := vmSections(&rxeguest.Result{Output: out})
	assert.Equal(t, map[int]string{0: "\nzero\n", 1: "\none\ntwo\n"}, secs)
	assert.Equal(t, "\nmsgs\n", end)
	assert.True(t, strings.Contains(vmTrim("CPU-BEFORE: x\nline\n!! FAILED\n"), "line"))
}

func TestParseVMConfigs(t *testing.T) {
	c, err := parseVMConfigs("1:2, 2:4")
	require.NoError(t, err)
	assert.Equal(t, []vmConfig{{1, 2}, {2, 4}}, c)
	assert.Equal(t, "2 vCPUs, 4 queue pairs", c[1].label())
	for _, bad := range []string{"", "1", "0:1", "1:x"} {
		_, err := parseVMConfigs(bad)
		assert.Errorf(t, err, "%q", bad)
	}
}

func TestVMFiguresRefuseZero(t *testing.T) {
	v, err := vmMsgRate(bwOutput)
	require.NoError(t, err)
	require.Equal(t, 0.006075, v)
	_, err = vmMsgRate(strings.Replace(bwOutput, "0.006075", "0.000000", 1))
	require.Error(t, err, "a rate of zero: perftest could not calibrate its clock")
	mbs := strings.ReplaceAll(bwOutput, "Gb/sec", "MB/sec")
	v, err = vmBandwidth(mbs)
	require.NoError(t, err)
	require.Equal(t, 3.18, v)
	_, err = vmBandwidth(strings.Replace(mbs, "3.18", "0.00", 1))
	require.Error(t, err)
	v, err = vmBandwidth(strings.ReplaceAll(bwOutput, "Gb/sec", "MiB/sec"))
	require.NoError(t, err, "trixie's perftest labels the same unit MiB/sec")
	require.Equal(t, 3.18, v)
	_, err = vmBandwidth(bwOutput)
	require.Error(t, err, "a report in Gb/sec")
	_, err = vmLatency(strings.Replace(latOutput, "252.59", "0.00", 1))
	require.Error(t, err)
	v, err = vmLatency(latOutput)
	require.NoError(t, err)
	require.Equal(t, 252.59, v)
}

// A guest that ends leaves its peer grace to end, then stops it; a peer
// that ends within grace is not stopped.
func TestWaitBothStopsThePeerOfAnEndedGuest(t *testing.T) {
	stopped := make(chan struct{})
	var stops atomic.Int32
	stop := func() {
		if stops.Add(1) == 1 {
			close(stopped)
		}
	}
	ended := func() (*rxeguest.Result, error) { return &rxeguest.Result{Output: "ended"}, nil }
	hung := func() (*rxeguest.Result, error) {
		<-stopped
		return &rxeguest.Result{Output: "stopped"}, errors.New("guest did not finish")
	}
	a, b := waitBoth(ended, hung, 10*time.Millisecond, stop)
	require.Equal(t, "ended", a.res.Output)
	require.Equal(t, "stopped", b.res.Output)
	require.Error(t, b.err)
	require.EqualValues(t, 1, stops.Load())

	late := func() (*rxeguest.Result, error) {
		time.Sleep(5 * time.Millisecond)
		return &rxeguest.Result{Output: "late"}, nil
	}
	stops.Store(0)
	a, b = waitBoth(late, ended, time.Minute, func() { stops.Add(1) })
	require.Equal(t, "late", a.res.Output)
	require.Equal(t, "ended", b.res.Output)
	require.Zero(t, stops.Load())
}
