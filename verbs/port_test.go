package verbs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/counters"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// TestPortFollowsLink reports the link down, down again, and up to the
// engine's device: the port's state follows, each change raises one port
// event (to the program on the device, also through a daemon), and
// link_downed counts the one move to DOWN.
func TestPortFollowsLink(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		p := newPairMode(t, m, memlink.Config{}, verbs.Config{})
		dev, engine := p.a, p.engA
		require.Equal(t, verbs.PortActive, dev.PortState(), "a new device's port")
		steps := []struct {
			up    bool
			event verbs.EventType // 0: none
			state verbs.PortState
		}{
			{false, verbs.EventPortErr, verbs.PortDown},
			{false, 0, verbs.PortDown},
			{true, verbs.EventPortActive, verbs.PortActive},
		}
		for i, s := range steps {
			engine.SetLinkUp(s.up)
			if s.event != 0 {
				select {
				case ev := <-dev.Events():
					assert.Equal(t, s.event, ev.Type, "step %d", i)
					assert.Equal(t, 1, ev.Port, "step %d", i)
				case <-time.After(10 * time.Second):
					t.Fatalf("step %d: no %v", i, s.event)
				}
			}
			assert.Equal(t, s.state, dev.PortState(), "step %d", i)
		}
		select {
		case ev := <-dev.Events():
			t.Fatalf("an event for no change: %+v", ev)
		case <-time.After(50 * time.Millisecond):
		}
		downed, ok := counters.Get(engine.DeviceCounters(), "link_downed")
		require.True(t, ok)
		assert.EqualValues(t, 1, downed)
	})
}
