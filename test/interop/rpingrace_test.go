package interop

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRpingExitRace checks what checkNoneFailed lets pass: a guest rping
// that printed its pings and then failed reading its destroyed event
// channel (as in CI at 4ab8f36), and nothing else.
func TestRpingExitRace(t *testing.T) {
	pings := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ\nping data: rdma-ping-1: BCDEFGHIJKL"
	race := pings + "\nrdma_get_cm_event: Bad file descriptor\nMNOPQRSTUVWXYZ[\n\n!! FAILED: rping -v -V -C 100 -S 1024 -c -a 10.77.0.1\n"
	assert.True(t, rpingExitRace.MatchString(race))
	assert.True(t, rpingExitRace.MatchString(strings.TrimPrefix(race, pings+"\n")))
	assert.True(t, rpingExitRace.MatchString(pings+"rdma_get_cm_event: Bad file descriptor\n!! FAILED: rping -c -a 10.77.0.1\n"))
	for name, body := range map[string]string{
		"another error":        pings + "\nrdma_get_cm_event: Connection reset by peer\n!! FAILED: rping -v -V -C 100 -S 1024 -c -a 10.77.0.1\n",
		"another tool":         pings + "\nrdma_get_cm_event: Bad file descriptor\n!! FAILED: ib_send_bw -R 10.77.0.1\n",
		"the race, no failure": pings + "\nrdma_get_cm_event: Bad file descriptor\n",
		"a failure, no race":   pings + "\n!! FAILED: rping -v -V -C 100 -S 1024 -c -a 10.77.0.1\n",
	} {
		assert.False(t, rpingExitRace.MatchString(body), name)
	}
}
