package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/roce/xdplink"
)

// bench-vm reads this line (its vmBindRE) to tell which mode each run's
// sockets got; a partial zero-copy bind keeps its counts.
func TestBindLine(t *testing.T) {
	a := xdplink.Attachment{XDP: "native", Bind: "zero-copy on 1 of 2 queues", Queues: 2}
	require.Equal(t, "softnic: eth0: AF_XDP bind zero-copy on 1 of 2 queues, XDP native, 2 queues", bindLine("eth0", a))
}
