package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/netnstest"
)

// A counted run must deliver only frames that were sent, all of them
// steered by the program, with no frame-ownership violations on either
// side. Loss is allowed (the receiver may fall behind), silence is not.
func TestBlastCounts(t *testing.T) {
	netnstest.Integration(t)
	for _, tc := range []struct{ size, queues int }{{64, 1}, {1082, 1}, {4158, 1}, {9014, 1}, {1082, 2}} {
		size := tc.size
		t.Run(fmt.Sprintf("%dx%d", size, tc.queues), func(t *testing.T) {
			r, err := Run(context.Background(), Options{Size: size, Count: 20000, Frames: 1024, Queues: tc.queues})
			require.NoError(t, err)
			for q, n := range r.PerQueue {
				assert.NotZerof(t, n, "queue %d received nothing (per queue %v)", q, r.PerQueue)
			}
			assert.EqualValues(t, 20000, r.Sent, "sent")
			assert.NotZero(t, r.Received, "received")
			assert.LessOrEqual(t, r.Received, r.Sent, "received of sent")
			// Frames the veth dropped never reach the program.
			assert.Equalf(t, r.Sent, r.Program.Steered+r.VethDropped, "program steered %d and veth dropped %d", r.Program.Steered, r.VethDropped)
			assert.Equalf(t, r.Received*uint64(size), r.Bytes, "bytes received in %d frames of %d", r.Received, size)
			assert.Zero(t, r.SenderStats.OwnershipErrors+r.ReceiverStats.OwnershipErrors, "ownership errors")
			assert.Zerof(t, r.SenderStats.TxInvalidDescs, "sender %+v", r.SenderStats)
			assert.Zerof(t, r.ReceiverStats.RxInvalidDescs, "receiver %+v", r.ReceiverStats)
			// Every drop is accounted for by the kernel.
			assert.Equalf(t, r.ReceiverStats.RxDropped+r.ReceiverStats.RxRingFull+r.VethDropped, r.Sent-r.Received,
				"lost frames against the kernel's %d dropped + %d ring full + %d at the veth",
				r.ReceiverStats.RxDropped, r.ReceiverStats.RxRingFull, r.VethDropped)
		})
	}
}

// BenchmarkBlast reports the raw AF_XDP ceiling over a veth pair: frames/s
// and Gb/s at the receiver for 64-byte frames, RoCEv2 frames with IB MTU
// 1024 (1082 bytes) and IB MTU 4096 (4158 bytes, multi-buffer on a 9000-byte
// link). Each iteration is one frame; the setup of namespaces and sockets
// is included in ns/op but not in the reported rates.
func BenchmarkBlast(b *testing.B) {
	netnstest.Integration(b)
	for _, size := range []int{64, 1082, 4158} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			r, err := Run(context.Background(), Options{Size: size, Count: max(b.N, 1000)})
			require.NoError(b, err)
			b.ReportMetric(r.FramesPerSecond(), "frames/s")
			b.ReportMetric(r.Gbps(), "Gb/s")
			b.ReportMetric(float64(r.Sent-r.Received)/float64(r.Sent)*100, "%lost")
		})
	}
}

// SIGINT stops a run early, and the namespaces, veth pair, program and
// sockets are gone when the process exits.
func TestInterruptCleansUp(t *testing.T) {
	if os.Getenv("XDPBLAST_RUN_MAIN") == "1" {
		os.Args = []string{"xdpblast", "-size", "64", "-duration", "60s"}
		main()
		os.Exit(0)
	}
	netnstest.Integration(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptCleansUp$")
	cmd.Env = append(os.Environ(), "XDPBLAST_RUN_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	prefix := fmt.Sprintf("snt%d-", cmd.Process.Pid)
	// Wait for the run to have set up its namespaces.
	for deadline := time.Now().Add(10 * time.Second); len(namespaces(prefix)) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			require.FailNowf(t, "no namespaces appeared", "output:\n%s", out.String())
		}
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoErrorf(t, err, "exit after SIGINT; output:\n%s", out.String())
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		require.FailNowf(t, "still running 10s after SIGINT", "output:\n%s", out.String())
	}
	assert.Empty(t, namespaces(prefix), "namespaces left after SIGINT")
	assert.Contains(t, out.String(), "frames/s", "no result printed")
	t.Logf("output:\n%s", out.String())
}

func namespaces(prefix string) []string {
	entries, _ := os.ReadDir("/var/run/netns")
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}
