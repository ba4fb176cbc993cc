package system

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPortState takes end B's interface down and up while Debian's
// ibv_asyncwatch watches end A's device: A's port follows its carrier in
// ibv_devinfo, the program gets IBV_EVENT_PORT_ERR and then
// IBV_EVENT_PORT_ACTIVE, softnic stat counts one link_downed, and the
// devices carry traffic again afterwards.
func (w *providerWorld) testPortState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch := w.command(ctx, w.a, "ibv_asyncwatch", "-d", "softnic_"+w.a.Ifname)
	events, exited := startWatched(t, watch)
	require.Eventually(t, func() bool { return strings.Contains(events.String(), "async event FD") }, 30*time.Second,
		20*time.Millisecond, "ibv_asyncwatch did not start:\n%s", events)

	portState := func() string {
		out, err := w.command(ctx, w.a, "ibv_devinfo", "-d", "softnic_"+w.a.Ifname).CombinedOutput()
		require.NoError(t, err, string(out))
		m := regexp.MustCompile(`state:\s+(\S+)`).FindStringSubmatch(string(out))
		require.NotNil(t, m, "no port state:\n%s", out)
		return m[1]
	}
	require.Equal(t, "PORT_ACTIVE", portState())
	for _, step := range []struct{ updown, state, event string }{
		{"down", "PORT_DOWN", "event_type IBV_EVENT_PORT_ERR (10), port 1"},
		{"up", "PORT_ACTIVE", "event_type IBV_EVENT_PORT_ACTIVE (9), port 1"},
	} {
		out, err := w.b.Command("ip", "link", "set", w.b.Ifname, step.updown).CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Eventually(t, func() bool { return strings.Contains(events.String(), step.event) }, 10*time.Second,
			20*time.Millisecond, "link %s: ibv_asyncwatch printed:\n%s", step.updown, events)
		assert.Equal(t, step.state, portState(), "link %s", step.updown)
	}
	select {
	case err := <-exited:
		t.Fatalf("ibv_asyncwatch ended: %v\n%s", err, events)
	default:
	}
	watch.Process.Kill()
	<-exited
	assert.Equal(t, 2, strings.Count(events.String(), "event_type"), "events:\n%s", events)

	stat := w.a.Command(w.bin, "stat", "--run-dir", w.runDir, "-d", w.a.Ifname)
	out, err := stat.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Regexp(t, `\blink_downed 1\b`, string(out))

	// Neighbours and IPv6 addresses went with the link; traffic resumes.
	require.NoError(t, w.b.Ping(w.a.Addr4(), 10*time.Second))
	args := []string{"ibv_rc_pingpong", "-g", "1", "-n", "100"}
	sout, cout := w.pair(t, 18515, args, args)
	for _, o := range []string{sout, cout} {
		assert.Contains(t, o, "100 iters in", "a side did not finish after the link came back")
	}
}
