package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon"
)

// freeTCPAddr returns a loopback address with a port nobody listens on now.
func freeTCPAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// scrape returns the body of http://addr/metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// softnic daemon --metrics serves every device's counters, with device
// and port labels, and the QPs' series; an address it cannot listen on
// fails the start.
func TestDaemonMetrics(t *testing.T) {
	useServedMem(t)
	dir := t.TempDir()
	addr := freeTCPAddr(t)
	cfg := daemon.Config{Mode: 0o666, Group: -1, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := daemonOptions{ifaces: listFlag{"memA", "memB"}, runDir: dir, metrics: addr, metricsQPs: 2}
	go func() { done <- serveDevices(ctx, o, cfg) }()
	c := dialWhenServed(t, filepath.Join(dir, "softnic_memB.sock"))
	defer c.Close()
	pd, err := c.AllocPD()
	require.NoError(t, err)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	_, err = c.CreateQP(hostifQP(pd, cq.Handle))
	require.NoError(t, err)

	var body string
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	body = scrape(t, addr)
	for _, dev := range []string{"softnic_memA", "softnic_memB"} {
		require.Contains(t, body, `softnic_sent_pkts_total{device="`+dev+`",port="1"} `)
		require.Contains(t, body, `softnic_completer_retry_err_total{device="`+dev+`",port="1"} 0`)
	}
	require.Contains(t, body, "# TYPE softnic_rcvd_pkts_total counter")
	require.Contains(t, body, `softnic_qp_sent_pkts_total{device="softnic_memB",port="1",qpn="`)
	require.Regexp(t, `softnic_qps\{device="softnic_memB",port="1"\} [1-9]`, body)
	require.Contains(t, body, "go_goroutines ", "the runtime's metrics too")

	o2 := daemonOptions{ifaces: listFlag{"memC"}, runDir: t.TempDir(), metrics: addr}
	err = serveDevices(context.Background(), o2, cfg)
	require.ErrorContains(t, err, "--metrics", "the address is taken")
	cancel()
	require.NoError(t, <-done)
}
