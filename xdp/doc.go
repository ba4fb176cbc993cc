// Package xdp is softnic's AF_XDP socket layer, written directly on
// golang.org/x/sys/unix.
//
// A Socket is bound to one receive queue of one interface and owns one
// UMEM: a memory area of equal-sized frames (chunks) shared with the
// kernel. Half of the frames circulate through the fill and RX rings for
// reception, the other half through the TX and completion rings for
// transmission. Every frame has an owner (kernel or application, receive or
// transmit) tracked by the socket, so a frame is never handed out twice and
// a frame the caller does not hold is refused (ErrFrameOwnership).
//
// Receiving: Receive copies a batch of descriptors off the RX ring; Frame
// gives the bytes of each (always use the descriptor's address: in copy mode
// data starts 256 bytes into the chunk); Release returns the frames to the
// fill ring. Wait blocks in poll(2) until something arrives.
//
// Transmitting: NextTxFrame hands out a free frame to build a packet in;
// Transmit queues descriptors on the TX ring; Flush kicks the kernel with
// sendto(2) when it asks for it (need_wakeup: in copy mode after every
// batch) and reaps the completion ring so frames become free again. After
// the kernel refused a kick (the driver's queue was full), Flush kicks again
// once a frame completed, after RetryTx, or after a few dozen flushes.
//
// Packets longer than a frame (Config.MultiBuffer, XDP_USE_SG) span several
// descriptors; all but the last have More set, on receive and on transmit.
// Receive hands out whole packets only, and Transmit queues only whole
// packets.
//
// With Config.Contiguous (copy mode only) such packets need no joining or
// splitting: receive buffers overlap by the kernel's 256-byte headroom and
// go back to the fill ring in the order the kernel took them, so the pieces
// of a received packet follow each other in the UMEM and Span returns the
// whole packet as one slice. Transmit frames are TxFrameSize bytes, and
// AppendTx cuts a packet built in one into chunk-sized descriptors.
//
// The ring indexes are shared with the kernel and are read with atomic
// loads (acquire) and published with atomic stores (release); see ring.go.
//
// Zero-copy is used when the driver offers it (ModeAuto) and copy mode
// otherwise; veth offers only copy mode. Busy polling is optional
// (Config.BusyPoll). Stats reports the kernel's ring statistics
// (XDP_STATISTICS) and the socket's counters.
//
// A socket receives nothing until an XDP program redirects frames into it:
// package bpf provides softnic's program and its XSKMAP. Use one socket per
// receive queue; frames arriving on a queue without a socket stay with the
// kernel. A Socket is not safe for concurrent use.
package xdp
