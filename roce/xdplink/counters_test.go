package xdplink

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/xdp"
)

// The link's counters have unique names: the program's once (xdp_*), the
// link's own (link_*), the sockets' summed (xsk_*), no gauges.
func TestAppendStatsNames(t *testing.T) {
	st := Stats{Sockets: make([]xdp.Stats, 2), RxOversized: 3, TxQueued: 9}
	st.Program.Steered = 5
	st.Sockets[0].RxDropped, st.Sockets[1].RxDropped = 1, 2
	st.Sockets[0].FreeTxFrames = 7
	cs := appendStats(nil, &st)
	got := map[string]uint64{}
	for _, c := range cs {
		_, dup := got[c.Name]
		require.False(t, dup, "counter %s twice", c.Name)
		got[c.Name] = c.Value
	}
	require.Equal(t, uint64(5), got["xdp_steered"])
	require.Equal(t, uint64(3), got["link_rx_oversized"])
	require.Equal(t, uint64(3), got["xsk_rx_dropped"], "summed over the sockets")
	for _, gauge := range []string{"link_tx_queued", "xsk_free_tx_frames", "xsk_fill_pending", "link_xdp_steered", "link_sockets"} {
		require.NotContains(t, got, gauge)
	}
}
