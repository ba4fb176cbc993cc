package middleware

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// TestUCXInfo runs `ucx_info -d`: it must list the softnic device as a
// memory domain with rc_verbs and ud_verbs on its port, and exit 0 (it
// unmaps a registered buffer before ibv_dereg_mr, which crashed the
// provider once).
func TestUCXInfo(t *testing.T) {
	w := newWorld(t, "ucx-utils", "ucx_info")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := w.snapshot(t)
	out, err := combined(w.user(ctx, &w.pair.A, "ucx_info", "-d"))
	require.NoError(t, err, "ucx_info -d: %s\n%s", firstError(out), systest.Tail(out, 30))
	assert.Contains(t, out, "# Memory domain: "+w.a.Name+"\n", "ucx_info -d lists no softnic memory domain")
	for _, tl := range []string{"rc_verbs", "ud_verbs"} {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^#\s+Transport: %s\n#\s+Device: %s:1$`, tl, w.a.Name))
		assert.Regexp(t, re, out, "ucx_info -d lists no %s on %s:1", tl, w.a.Name)
	}
	// ucx_info opened the device through the daemon (its interface
	// resources were made and released there): the daemon saw its
	// session start and end.
	assert.Regexp(t, `session started" pid=\d+ uid=65534`, w.a.Log.String())
	// It sends nothing: the device's counters show no packet of it.
	d := w.delta(t, before)
	assert.Zero(t, d.a["sent_pkts"], "ucx_info -d sent packets")
}
