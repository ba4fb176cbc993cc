package system

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRCPingpongTimestamps runs Debian's ibv_rc_pingpong -t between two
// daemons, as user nobody (softnic exec as root dropping to nobody, then
// softnic exec itself started by runuser -u nobody), through the provider: its CQ is an
// ibv_create_cq_ex one with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP (after it
// checked completion_timestamp_mask), and it reports the device clock's
// ticks between receive completions, read with ibv_wc_read_completion_ts.
// Each receive is stamped by the daemon's engine as it makes it, so the
// gaps are positive and ordered min <= average <= max.
func TestRCPingpongTimestamps(t *testing.T) {
	w := newProviderWorld(t)
	args := []string{"ibv_rc_pingpong", "-g", "1", "-n", "300", "-t"}
	for _, runuser := range []bool{false, true} {
		w.runuser = runuser
		sout, cout := w.pair(t, 18515, args, args)
		for _, out := range []string{sout, cout} {
			require.Contains(t, out, "300 iters in", "a side did not finish:\n%s", out)
			lo, avg, hi := pingpongTicks(t, out, "Min"), pingpongTicks(t, out, "Average"), pingpongTicks(t, out, "Max")
			t.Logf("runuser %v: receive completion gaps (ns): min %v, average %v, max %v", runuser, lo, avg, hi)
			require.Greater(t, hi, 0.0, "no time between receive completions:\n%s", out)
			require.LessOrEqual(t, lo, avg, out)
			require.LessOrEqual(t, avg, hi, out)
		}
	}
	w.stop(t)
}

// pingpongTicks returns the figure of ibv_rc_pingpong -t's line "<what>
// receive completion clock cycles = N".
func pingpongTicks(t *testing.T, out, what string) float64 {
	t.Helper()
	m := regexp.MustCompile(what + ` receive completion clock cycles = ([0-9.]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "no %s line in:\n%s", what, out)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}
