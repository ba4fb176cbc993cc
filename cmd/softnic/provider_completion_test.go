package main

import (
	"context"
	"testing"
	"time"
)

// TestProviderCMQPAttributes runs testdata/cm_qp_attr.c, a server on one
// end and its client on the other, as user nobody through the provider
// and softnic's librdmacm: ibv_query_qp of an rdma_cm ID's QP says the
// ACK timeout rdma_set_option set, right after rdma_accept and after
// ESTABLISHED, and the retry counts, READ depths, path MTU, destination
// QPN and PSNs the connection gave it, as the kernel's rdma_cm sets them
// (each side checks the other's against its own); and the QPs, asked for
// no inline data as rdma_xclient asks, send 16 bytes inline.
func TestProviderCMQPAttributes(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "cm_qp_attr", "-lrdmacm")
	addr := w.a.Addr4().String()
	server := startCProgram(t, w.command(ctx, w.a, prog, "server", addr, "7471"))
	server.waitFor(t, "listening")
	client := startCProgram(t, w.command(ctx, w.b, prog, "client", addr, "7471"))
	client.finish(t, 19)
	server.finish(t, 20)
	w.stop(t)
}
