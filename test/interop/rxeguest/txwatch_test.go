package rxeguest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTxWatch runs the guest's TX watcher on the host against stand-ins for
// tc and tx_packets: while the device completes frames it stays quiet, even
// with frames handed to it; once completions stop while the qdisc hands it
// more, it reports the stall once.
func TestTxWatch(t *testing.T) {
	dir := t.TempDir()
	sent, stats, kmsg := filepath.Join(dir, "sent"), filepath.Join(dir, "tx_packets"), filepath.Join(dir, "kmsg")
	tc := filepath.Join(dir, "tc")
	require.NoError(t, os.WriteFile(tc, []byte("#!/bin/sh\necho 'qdisc fq_codel 0: root'\necho \" Sent 99 bytes $(cat "+sent+") pkt (dropped 0)\"\n"), 0o755))
	// Each count is replaced whole, as a read of sysfs sees it.
	write := func(path string, v int) {
		require.NoError(t, os.WriteFile(path+".new", []byte(fmt.Sprint(v)), 0o644))
		require.NoError(t, os.Rename(path+".new", path))
	}
	set := func(handed, completed int) {
		write(sent, handed)
		write(stats, completed)
	}
	set(10, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", string(txWatchScript))
	cmd.Env = append(os.Environ(), "TXWATCH_TC="+tc, "TXWATCH_STATS="+stats, "TXWATCH_KMSG="+kmsg, "TXWATCH_INTERVAL=0.02")
	require.NoError(t, cmd.Start())
	defer func() { cancel(); cmd.Wait() }()
	report := func() string { b, _ := os.ReadFile(kmsg); return string(b) }

	// Healthy: completions follow the frames handed over.
	for i := range 30 {
		set(10+2*i, 3+2*i)
		time.Sleep(20 * time.Millisecond)
	}
	require.Empty(t, report(), "a device that completes frames")
	// Idle: nothing handed over, nothing completed.
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, report(), "an idle device")
	// Stalled: frames keep coming, none completes.
	for i := range 30 {
		set(100+i, 61)
		time.Sleep(20 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return report() != "" }, 2*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	r := report()
	require.Equal(t, 1, strings.Count(r, "\n"), "one report: %q", r)
	require.True(t, strings.HasPrefix(r, "<3>"+txStalledMarker), r)
}
