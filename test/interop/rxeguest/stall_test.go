package rxeguest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNICStalled finds the kernel's TX watchdog report in a console as a
// CI run's guest printed it, and the TX watcher's report (txwatch.sh), and
// nothing in a console without either.
func TestNICStalled(t *testing.T) {
	g := &Guest{dir: t.TempDir()}
	console := filepath.Join(g.dir, "console.log")
	require.NoError(t, os.WriteFile(console, []byte("[    1.2] virtio_net virtio1 eth0: renamed\r\n"), 0o644))
	require.Empty(t, g.NICStalled())
	require.NoError(t, os.WriteFile(console, []byte("[    1.2] virtio_net virtio1 eth0: renamed\r\n"+
		"[  874.222091] virtio_net virtio1 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 163608 ms\r\n"+
		"[  874.222311] virtio_net virtio1 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 163608000 usecs ago\r\n"), 0o644))
	require.Equal(t, "[  874.222091] virtio_net virtio1 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 163608 ms", g.NICStalled())
	require.NoError(t, os.WriteFile(console, []byte("[    1.2] virtio_net virtio1 eth0: renamed\r\n"+
		"[  541.2] rxeguest: eth0 transmit stalled: 6 frames handed to the device since it last completed one, 5 intervals ago\r\n"), 0o644))
	require.Equal(t, "[  541.2] rxeguest: eth0 transmit stalled: 6 frames handed to the device since it last completed one, 5 intervals ago", g.NICStalled())
	require.NoError(t, os.WriteFile(console, []byte("[    1.2] virtio_net virtio1 eth0: renamed\r\n"+
		"[  300.1] rxeguest: eth0 cannot reach 10.77.0.1\r\n"), 0o644))
	require.Equal(t, "[  300.1] rxeguest: eth0 cannot reach 10.77.0.1", g.NICStalled())
}
