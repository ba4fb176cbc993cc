package verbs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestIdleDevicesSleep checks that connected but idle devices block instead
// of spinning: over half a second they use a small fraction of a core.
func TestIdleDevicesSleep(t *testing.T) {
	_, x, y := connectedPair(t, memlink.Config{}, defaultOpts())
	lmr, _ := regMR(t, x.pd, 64, allAccess)
	rmr, _ := regMR(t, y.pd, 64, allAccess)
	require.NoError(t, x.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{lmr.SGE(0, 64)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}))
	waitOK(t, x.scq, 1)
	cpu0 := cpuTime()
	time.Sleep(500 * time.Millisecond)
	used := cpuTime() - cpu0
	t.Logf("CPU used while idle: %v", used)
	require.Less(t, used, 100*time.Millisecond)
}
