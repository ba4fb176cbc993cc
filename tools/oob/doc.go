// Package oob speaks the out-of-band TCP exchanges of the standard RDMA test
// tools, so that either end of a test can be the real tool or softnic:
//
//   - ibv_rc_pingpong (rdma-core libibverbs/examples/rc_pingpong.c): one
//     "LID:QPN:PSN:GID" line each way and a closing "done".
//   - perftest 4.5 (protocol version "6.06", src/perftest_communication.c):
//     versions, system data, MTU, the 108-byte keys message per QP, the
//     handshakes each test makes around its run (also in the bidirectional
//     mode), the bandwidth report and the closing handshake.
//
// The package knows nothing of the RDMA engine: it makes the TCP connection
// as the tools do (Dial, Accept), formats and parses the messages (typed
// errors, never a panic, on malformed input) and drives the sequences over
// a net.Conn with deadlines, calling back into the caller where the real
// tool would touch its QPs.
package oob
