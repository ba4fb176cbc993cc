// Package cm runs the InfiniBand communication manager protocol (IBA vol 1
// ch. 12) over CM MADs: the REQ/REP/RTU handshake, MRA, REJ and the
// DREQ/DREP disconnect, with the retry timers, duplicate handling and
// TIMEWAIT of Linux drivers/infiniband/core/cm.c.
//
// It is a pure protocol state machine. It never touches a QP: the layer
// above (rdmacm, as Linux cma.c sits on cm.c) moves its QPs through their
// states when the events say so. MADs come in through Manager.Receive,
// from QP1, and go out through Config.Send, to the peer's QP1.
//
// Every Handler runs on the Manager's one dispatch goroutine, in the order
// the events happened, and may call Conn methods.
//
// Timing is cm.c's, with 4.096 µs × 2^t taken as 2^(t-8) ms: a REQ waits
// two packet lifetimes plus the peer's CM response timeout (6.1 s with
// rdma_cm's values on RoCE) and is sent up to 1+15 times; a REP waits the
// REQ's local CM response timeout (4.1 s) as often; a DREQ waits as its
// side's REQ or REP did; TIMEWAIT lasts the path's ACK timeout (2 s).
// Config.Millisecond scales all of it for tests.
//
// Where this package differs from cm.c: a REQ seen again while our REP is
// unanswered gets the REP again (cm.c waits for its timer); a REQ or REP
// whose retries run out sends REJ Timeout before failing, as IBA's state
// diagram does; a DREQ is answered with a DREP at once rather than by the
// consumer, so EventDREQReceived finds the connection in TIMEWAIT.
package cm
