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
package cm
