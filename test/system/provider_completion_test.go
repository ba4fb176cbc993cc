package system

import (
	"context"
	"testing"
	"time"
)

// TestProviderUDCompletions runs testdata/ud_completion.c on both ends,
// as user nobody through the provider, over an IPv4 GID and over an IPv6
// one: a UD receive's completion says IBV_WC_GRH, the sender's QPN, P_Key
// index 0 and in its SL the RoCE packet type as ConnectX does (2 IPv4, 1
// IPv6: what UCX's UD transport reads), through ibv_poll_cq and the
// extended CQ's read_sl and read_wc_flags; the GRH holds what mlx5 and
// rxe put there, which libibverbs' ibv_init_ah_from_wc reads; and a QP
// asked for no inline data sends 16 bytes inline.
func TestProviderUDCompletions(t *testing.T) {
	w := newProviderWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prog := buildCProgram(t, ctx, w.bin, "ud_completion")
	for _, family := range []string{"ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			a := startCProgram(t, w.command(ctx, w.a, prog, family))
			ainfo := a.waitForPrefix(t, "info ")
			b := startCProgram(t, w.command(ctx, w.b, prog, family))
			binfo := b.waitForPrefix(t, "info ")
			a.tell(t, binfo)
			b.tell(t, ainfo)
			checks := 31
			if family == "ipv6" {
				checks = 27
			}
			a.finish(t, checks)
			b.finish(t, checks)
		})
	}
	w.stop(t)
}

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
