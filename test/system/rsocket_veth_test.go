package system

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRstream runs Debian's rstream (rsockets, librdmacm) between two
// softnic daemons as user nobody: softnic's librdmacm carries rsockets
// in rdma-core's protocol (provider/rsocket_int.h). -T v verifies each
// transfer's bytes; blocking (default), with large transfers and few
// iterations, and non-blocking sockets.
func TestRstream(t *testing.T) {
	w := newProviderWorld(t)
	for _, tc := range []struct {
		name string
		args []string
		last string // the start of the result line that ends the run
	}{
		{"blocking", []string{"-T", "v"}, "1m_bw"},
		{"large", []string{"-S", "65536", "-C", "1000", "-T", "v"}, "custom    64k     1k"},
		{"async", []string{"-T", "a", "-T", "v", "-S", "4096", "-C", "200"}, "custom    4k      200"},
		{"nonblocking", []string{"-T", "n", "-T", "v", "-S", "4096", "-C", "200"}, "custom    4k      200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sout, cout := w.cmPair(t, append([]string{"rstream"}, tc.args...),
				append([]string{"rstream", "-s", "ADDR"}, tc.args...))
			for _, out := range []string{sout, cout} {
				assert.Regexp(t, `(?m)^`+tc.last, out, "rstream's result line")
				assert.NotContains(t, strings.ToLower(out), "fail", out)
			}
			t.Logf("client:\n%s", cout)
		})
	}
	w.stop(t)
}
