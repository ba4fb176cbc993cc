package interop

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A guest that stalled during a run whose softnic side ended well (its
// tool timed out on the guest) has that run done again on the fresh guest,
// before the runs left; runs that passed on the guest are not repeated.
func TestStepsAfterStall(t *testing.T) {
	a, b, c, d := interopRun{name: "a"}, interopRun{name: "b"}, interopRun{name: "c"}, interopRun{name: "d"}
	steps := []runStep{{r: a}, {r: b}, {r: c, client: true}, {r: d, client: true}}
	sections := map[string]string{
		"a client": "ok\n",
		"b client": "Terminated\n!! TIMED OUT after 90 s\n!! FAILED: ib_write_lat\n",
	}
	got, again := stepsAfterStall(steps, 2, sections)
	assert.Equal(t, 1, again)
	assert.Equal(t, []runStep{{r: a}, {r: b}, {r: b}, {r: c, client: true}, {r: d, client: true}}, got)
	assert.Equal(t, "b client", got[2].guestKey())
	assert.Equal(t, "c server", got[3].guestKey())

	got, again = stepsAfterStall(steps, 1, map[string]string{"a client": "ok\n"})
	assert.Zero(t, again)
	assert.Equal(t, steps, got)
}
