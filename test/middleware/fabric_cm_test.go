package middleware

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"
)

// TestFabricInfo runs `fi_info -p 'verbs;ofi_rxm'`: libfabric's reliable
// datagram endpoint over the verbs provider's connections must be there
// on the softnic device.
func TestFabricInfo(t *testing.T) {
	w := newWorld(t, "libfabric-bin", "fi_info")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := combined(w.user(ctx, &w.pair.A, "fi_info", "-p", "verbs;ofi_rxm"))
	require.NoError(t, err, "fi_info -p 'verbs;ofi_rxm': %s\n%s", firstError(out), systest.Tail(out, 20))
	re := regexp.MustCompile(`(?m)^provider: verbs;ofi_rxm\n\s+fabric: .*\n\s+domain: ` + regexp.QuoteMeta(w.a.Name) +
		`\n(?:.*\n)*?\s+type: FI_EP_RDM$`)
	assert.Regexp(t, re, out, "fi_info lists no verbs;ofi_rxm RDM endpoint on %s", w.a.Name)
	// the provider listed the device the daemon serves: the daemon saw
	// fi_info's session
	assert.Regexp(t, `session started" pid=\d+ uid=65534`, w.a.Log.String())
}

// TestFabricPingpong runs fi_pingpong over the verbs provider's connected
// message endpoint (rdma_cm connections) and over verbs;ofi_rxm's reliable
// datagrams (ofi_rxm on verbs connections), the server on end A and the
// client on end B, 100 iterations of 64 KiB with data checks (-c).
func TestFabricPingpong(t *testing.T) {
	w := newWorld(t, "libfabric-bin", "fi_pingpong")
	port := 47592
	for _, c := range []fabricPingpong{{"msg", "verbs", 65536}, {"rdm", "verbs;ofi_rxm", 65536}} {
		port++
		t.Run(c.ep, func(t *testing.T) { w.fabricPingpong(t, c, port) })
	}
}
