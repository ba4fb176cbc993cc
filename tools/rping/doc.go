// Package rping is rdmacm-utils' rping (rdma-core
// librdmacm/examples/rping.c) on softnic: a client and a server that
// connect through the RDMA CM and then, once per ping, move a buffer with
// an RDMA READ and an RDMA WRITE. Either side may be the real rping.
//
// The exchange, per ping: the client SENDs {be64 addr, be32 rkey, be32
// size} naming its start buffer ("rdma-ping-N: " and letters); the server
// READs that buffer and SENDs a go-ahead; the client SENDs the same record
// for its sink buffer; the server WRITEs what it read there and SENDs
// another go-ahead. The client may then compare the two buffers (-V) and
// print the sink (-v).
//
// The steps keep the names of rping.c's functions (setup_qp,
// setup_buffers, test_server, test_client...) and print its lines, on the
// same streams, with its exit statuses. The loops (loops.go, with the CQ
// handler in completion.go) run over any connected QP; client.go and
// server.go connect one with package rdmacm.
//
// Where it differs from rping, on purpose: the one-connection server
// rejects a second client's request (rping leaves it unanswered for
// good); the server refuses a source larger than its sink before reading
// it (rping's READ fails locally); with -q the CM still creates and moves
// the QP, and only the server's accept parameters change as with rping's
// -q; a run stopped by a signal returns status 130.
package rping
