package system

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestODPPingpongThroughProvider runs Debian's ibv_rc_pingpong with
// on-demand paging between two daemons, as user nobody: -o registers its
// buffer with IBV_ACCESS_ON_DEMAND (after checking the RC caps
// query_device_ex reports), -P prefetches it with ibv_advise_mr, and -O
// registers the whole address space as an implicit region instead. Each
// side then exchanges 500 messages whose pages the daemon finds through
// the session's pager, never having checked them at registration.
func TestODPPingpongThroughProvider(t *testing.T) {
	w := newProviderWorld(t)
	for _, extra := range [][]string{{"-o"}, {"-o", "-P"}, {"-o", "-O"}, {"-o", "-O", "-P"}} {
		args := append([]string{"ibv_rc_pingpong", "-g", "1", "-n", "500", "-c"}, extra...)
		t.Run(strings.Join(extra, " "), func(t *testing.T) {
			sout, cout := w.pair(t, 18515, args, args)
			for _, out := range []string{sout, cout} {
				assert.Contains(t, out, "500 iters in", "a side did not finish")
			}
		})
	}
	w.stop(t)
}
