// Package perftest runs perftest's RDMA tests (write_bw, read_bw, send_bw,
// atomic_bw, write_lat, read_lat, send_lat) on softnic's verbs, speaking
// perftest 4.5's out-of-band exchange (protocol version 6.06, package
// tools/oob) so either end can be the real ib_*_bw / ib_*_lat, and
// prints results in perftest's exact layout, so numbers compare directly
// with ConnectX runs.
//
// Run is the program: given an opened Device and the TCP connection, it
// negotiates (versions, system data, MTU), creates the buffer, CQs and QPs
// as perftest's ctx_init does, exchanges keys, connects the QPs with
// perftest's attributes (GRH hop limit 255, min RNR timer 12, timeout 14,
// retry and RNR retry 7, out_reads both ways), runs the test loops of
// perftest_resources.c (run_iter_bw, run_iter_bw_server, run_iter_lat_write,
// run_iter_lat, run_iter_lat_send) and prints the figures.
//
// The printers (PrintTestInfo, PrintDest, PrintBWReport, PrintLatReport...)
// are pure functions of Params and result structs; the figures are computed
// as print_report_bw and print_report_lat in perftest_parameters.c do, from
// nanosecond timestamps instead of CPU cycles (so softnic needs no clock
// calibration and ignores -F).
//
// Differences a user may notice: the header says "PCIe relax order:
// Unsupported" (softnic has no PCIe device; perftest built without HAVE_RO
// prints the same); there is one port, RC only, and a duration run (-D)
// cannot be bidirectional (-b). write_lat reads its buffer for the
// peer's RDMA WRITE only after the region's remote-write sequence moved
// (awaitWrite), so it does not race the transport's copy.
//
// # The rdma_cm mode (-R)
//
// RunRDMACM is perftest's -R (work_rdma_cm, which also sets use_rdma_cm;
// -z alone, use_rdma_cm, is not supported). Facts from perftest v4.5-0.17
// (Debian 12's 4.5+0.17-1), src/perftest_communication.c and
// perftest_resources.c:
//
//   - Connections: 1 + NumQPs rdma_cm connections, all RC, port space TCP
//     (service ID 0x0106<<16 | port), all to the same port (-p, default
//     18515) of the server's IPv4 address; the server binds INADDR_ANY.
//     First the exchange connection (establish_connection:
//     rdma_client_connect / rdma_server_connect, listen backlog 1; the
//     server destroys its listening ID once it accepted). Then, after
//     versions, system data and MTU went over it, one connection per test
//     QP (create_rdma_cm_connection) on a new listening ID on the same port
//     (backlog NumQPs; requests beyond NumQPs are rejected), between two
//     keys handshakes on the exchange that carry zeroed keys. perftest's
//     server listens after the first handshake, racing the client's
//     requests; softnic's listens before it, and drops connections that a
//     half-failed client attempt abandons.
//   - The client resolves every test ID at once (address and route, 2000
//     ms each, up to NUM_OF_RETRIES 10 ADDR/ROUTE_ERROR events); a QP is
//     created when its route resolves and connected at once, so QP indices
//     follow the order of events. softnic connects the first QP alone and
//     then the others at once, so that a rejected attempt leaves nothing
//     at a perftest server, which takes exactly -q requests. It makes 10
//     attempts at the test
//     connections, 100 ms apart (4.5-0.17 reuses freed IDs on a retry;
//     softnic starts afresh), but one only at the exchange connection
//     (softnic retries while --connect-wait lasts).
//   - Private data: none from perftest in REQ or REP (librdmacm adds its
//     36-byte header to the REQ; rdma_getaddrinfo gives no ai_connect for
//     plain IPv4).
//   - Conn params: the exchange connection: responder_resources and
//     initiator_depth 0, retry_count --retry_count (7), rnr_retry_count 7.
//     Test connections, both sides: responder_resources = initiator_depth =
//     out_reads for read and atomic tests, else 0; retry_count and
//     rnr_retry_count both --retry_count (default DEF_RETRY_COUNT 7). The
//     server sets min_rnr_timer 12 on each accepted QP (ibv_modify_qp after
//     rdma_accept); perftest's server does not wait for ESTABLISHED
//     (softnic's does). The path MTU is rdma_cm's (the route's); the MTU
//     exchanged by check_mtu is only printed.
//   - The exchange: every message of the Ethernet mode, in the same order
//     and sizes (16-byte versions, 4-byte cycle buffer and cache line, 2-byte
//     MTU, 8-byte report values), each as one signaled SEND on the exchange
//     QP (tx and rx depth 1, wr_id SYNC_SPEC_ID 5); the sender waits for the
//     SEND's completion, the client sends first. Each side posts one receive
//     of sizeof(struct pingpong_dest) = 56 bytes before rdma_connect /
//     rdma_accept and reposts it as soon as a message is taken, so no message
//     may exceed 56 bytes. Keys are that struct, not the 108-byte text: be32
//     lid, out_reads, qpn, psn, rkey, 4 bytes of padding, be64 vaddr, 16 GID
//     bytes, be32 srqn and gid_index (the reader takes lid..GID). The keys'
//     PSN is random and unused: rdma_cm chose the QPs' PSNs. ctx_connect and
//     the GID-type check are skipped.
//   - The sequence of each test is the Ethernet one otherwise (oob.Run), but
//     ctx_close_connection ends with its handshake: no "done".
//   - The end: the client disconnects every test connection and waits for
//     each DISCONNECTED (rdma_cm_disconnect_nodes); the server disconnects
//     its last test ID and destroys all (which disconnects the rest). Nobody
//     disconnects the exchange connection: process exit destroys it.
//     softnic disconnects every test connection on both sides, waits up to
//     5 s for the events, then disconnects and destroys the exchange's.
//   - Printing: "rdma_cm QPs : ON", "Data ex. method : rdma_cm", and the
//     server's "Waiting for client rdma_cm QP to connect" block (printed
//     after the client connected).
//
// Newer perftest (6.29 on master) differs: struct pingpong_dest gains
// tail_markers_vaddr (a longer binary keys message), IPv6 addresses are
// allowed, test QPs are matched to their IDs, and the Ethernet mode's close
// no longer writes "done" either.
package perftest
