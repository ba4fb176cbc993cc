package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/softnic/softnic/daemon/metrics"
)

// metricsServer serves the daemon's counters at /metrics (--metrics).
type metricsServer struct {
	srv  *http.Server
	done chan struct{}
}

// listenMetrics listens on --metrics' address, before the daemon takes
// any interface: a bad or busy address fails its start at once.
func listenMetrics(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	return ln, nil
}

// serveMetrics serves the devices' counters on ln, with the Go runtime's
// and the process's metrics.
func serveMetrics(ln net.Listener, devs []*served, topQPs int, log *slog.Logger) *metricsServer {
	sources := make([]metrics.Source, len(devs))
	for i, s := range devs {
		sources[i] = metrics.Source{Name: s.name, Dev: s.srv}
	}
	reg := prometheus.NewRegistry()
	if topQPs == 0 {
		topQPs = -1 // --metrics-qps 0: none (Config's 0 is the default)
	}
	reg.MustRegister(metrics.NewCollector(sources, metrics.Config{TopQPs: topQPs}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "address", ln.Addr().String(), "path", "/metrics")
	return m
}

// stop stops serving, letting scrapes under way finish for a moment.
func (m *metricsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m.srv.Shutdown(ctx)
	<-m.done
}
