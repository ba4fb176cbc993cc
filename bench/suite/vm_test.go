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

func TestVMStepsAlternate(t *testing.T) {
	steps := vmSteps(vmTests, 3)
	require.Len(t, steps, 3*2*len(vmTests))
	var order []string
	for i, st := range steps {
		require.Equal(t, i, st.index)
		if i%len(vmTests) == 0 {
			order = append(order, fmt.Sprintf("%d%s", st.round, st.impl))
		}
	}
	assert.Equal(t, []string{"1rxe", "1softnic", "2softnic", "2rxe", "3rxe", "3softnic"}, order, "ABBA order of the blocks")
	assert.Equal(t, vmBasePort+5, steps[5].port())
}

func TestVMScript(t *testing.T) {
	o := vmOptions{rounds: 1, bwIters: 400, latIters: 500, rateIters: 4000, runTimeout: 90 * time.Second}
	steps := vmSteps(vmTests, 1)
	o.softnicEnv = "GOMAXPROCS=1"
	server := vmScript(steps, o, true, vmServerIP)
	client := vmScript(steps, o, false, vmServerIP)
	for _, want := range []string{"@@ step 0 rxe write_bw 1'\nrxe_on", "timeout -s TERM $RUN_TIMEOUT ib_write_bw -d rxe0 -x 1 -m 1024 -F -s 65536 -n 400 -p 18600 2>&1",
		"@@ step 4 softnic write_lat 1'\nrxe_off", "SOFTNIC_ENV='GOMAXPROCS=1'\n", "run_softnic perf write_lat -d eth0 -x 1 -m 1024 -F -s 8 -n 500 -p 18604 ||"} {
		assert.Contains(t, server, want)
	}
	for _, want := range []string{"retry_tool ib_write_bw -d rxe0 -x 1 -m 1024 -F -s 64 -n 4000 -p 18602 10.77.0.11",
		"run_softnic perf write_bw -d eth0 -x 1 -m 1024 -F -s 65536 -n 400 -p 18603 --connect-wait=90s 10.77.0.11"} {
		assert.Contains(t, client, want)
	}
}

const vmBW = "CPU-BEFORE: cpu  100 0 50 1000 0 0 10 0 0 0\n" +
	" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
	" 65536      400              0.00               %s   		   0.000300\n" +
	"CPU-AFTER: cpu  200 0 100 1100 0 0 60 0 0 0\n"

// vmTestRun fakes a one-shape run of one round: rxe's write_bw 20 MB/s,
// softnic's 10; softnic's latency run failed; no message-rate step ran.
func vmTestRun(steps []vmStep) *vmRun {
	r := &vmRun{cfg: vmConfig{cpus: 1, queues: 2}, server: map[int]string{}, client: map[int]string{}, took: time.Minute}
	r.client[0] = fmt.Sprintf(vmBW, "20.00")
	r.client[1] = "latency output\n"
	r.client[3] = fmt.Sprintf(vmBW, "10.00") + " softnic engine counters:\n  RxPackets                    460\n  Timeouts                     18\n  Forwarded                    460\n"
	r.server[3] = "XDP-MODE: xdpgeneric\n"
	r.client[4] = "softnic perf: boom\n!! FAILED\n"
	r.server[4] = "XDP-MODE: xdp\n"
	r.server[5] = "softnic perf: no XDP yet\n"
	r.serverEnd = "[    5.1] virtio_net virtio0 eth0: XDP request 2 queues but max is 1.\n"
	return r
}

func TestVMFiguresAndTable(t *testing.T) {
	s := &suite{started: time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)}
	o := vmOptions{configs: []vmConfig{{1, 2}}, rounds: 1, bwIters: 400, memMiB: 1024}
	s.look = vmLook(o.configs)
	steps := vmSteps(vmTests, 1)
	run := vmTestRun(steps)
	s.vmFigures(run, steps, 1)
	bw := s.res.Get("softnic/1cpu2q/write_bw")
	require.NotNil(t, bw)
	assert.Equal(t, 10.0, bw.Value)
	r, ok := s.res.Ratio("softnic/1cpu2q/write_bw", "rxe/1cpu2q/write_bw")
	assert.True(t, ok)
	assert.Equal(t, 0.5, r)
	assert.NotEmpty(t, s.res.Get("rxe/1cpu2q/write_lat").Err, "rxe latency output without a report")
	assert.Contains(t, s.res.Get("softnic/1cpu2q/write_lat").Err, "boom")
	assert.Contains(t, s.res.Get("softnic/1cpu2q/msgrate").Err, "never reached step 5")
	assert.Equal(t, "none ×1, xdp (native) ×1, xdpgeneric ×1", vmXDPModes(run.server, steps))

	md := s.vmMarkdown([]*vmRun{run}, steps, o, time.Minute)
	for _, want := range []string{"| 1 vCPU, 2 queue pairs | write_bw 64 KiB | 20.0 MB/s | 10.0 MB/s | 0.50 |",
		"| write_bw 64 KiB ≥ 1.0 × rxe, 1 vCPU, 2 queue pairs | 0.50 × | **no** |",
		"user 33%, sys 17%, softirq 17%, idle 33%", "XDP request 2 queues but max is 1.",
		"| 1 vCPU, 2 queue pairs | write_bw 64 KiB | 18 | 460 | 460 |", "| 1 vCPU, 2 queue pairs | write_bw 64 B message rate | — | — | — |"} {
		assert.Contains(t, md, want)
	}
	img, err := s.chart()
	require.NoError(t, err)
	_, err = png.Decode(bytes.NewReader(img))
	require.NoError(t, err)
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
