package roce

import (
	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// Loopback: packets to one of the device's own GIDs never reach the link,
// the way a NIC loops back traffic to its own GIDs. They wait in the lane's
// loopQ, in buffers of the lane's own, until the lane's pass hands them
// back to its engine (deliverLoopback).

// loopPacket is a packet waiting in loopQ.
type loopPacket struct {
	buf []byte
	n   int
	// dropped is set when the engine could not read the payload.
	dropped bool
	info    ibtransport.RecvInfo
	// net is the IP header the packet would have had on the link, for
	// the GRH of UD receives.
	net [ipv6HeaderLen]byte
}

// loopBuffers is the number of loopback packets that may wait at once.
const loopBuffers = 256

// loopPath sends one QP's packets to another QP of the same device.
type loopPath struct {
	ln    *lane
	info  ibtransport.RecvInfo
	encap Encap // for the IP header only
}

// loopPath returns the path from the device's address src to its address
// dst (indexes in the GID table), allocating the lane's loopback buffers
// the first time.
func (ln *lane) loopPath(t *gidTable, src, dst int, encap Encap) *loopPath {
	if ln.loopFree == nil && ln.loopQ == nil {
		size := maxPayloadHeaders + ibv.MTU4096.Bytes() + 8
		backing := make([]byte, loopBuffers*size)
		for j := range loopBuffers {
			ln.loopFree = append(ln.loopFree, backing[j*size:(j+1)*size:(j+1)*size])
		}
		ln.loopQ = make([]loopPacket, 0, loopBuffers)
	}
	return &loopPath{ln: ln, info: ibtransport.RecvInfo{SGID: t.gids[src], DGID: t.gids[dst], DGIDIndex: dst}, encap: encap}
}

// Buffer implements ibtransport.TxPath.
func (p *loopPath) Buffer() []byte {
	ln := p.ln
	if ln.loopBuf == nil {
		if len(ln.loopFree) == 0 {
			return nil // freed when the engine loop delivers the queue
		}
		ln.loopBuf = ln.loopFree[len(ln.loopFree)-1]
		ln.loopFree = ln.loopFree[:len(ln.loopFree)-1]
	}
	return ln.loopBuf
}

// Send implements ibtransport.TxPath.
func (p *loopPath) Send(n int) {
	ln := p.ln
	ln.loopQ = append(ln.loopQ, loopPacket{buf: ln.loopBuf, n: n, info: p.info})
	lp := &ln.loopQ[len(ln.loopQ)-1]
	p.encap.writeIPHeader(lp.net[:], p.encap.TrafficClass, udpHeaderLen+n+header.ICRCLen)
	lp.info.NetHeader = lp.net[:p.encap.ipHeaderLen()]
	ln.loopBuf = nil
	ln.ctr.Loopback.Add(1)
}

// deliverLoopback hands the packets QPs sent to QPs of the same device to
// the engine. It reports whether there were any.
func (ln *lane) deliverLoopback() bool {
	raw := ln.deliverRawLoop()
	if len(ln.loopQ) == 0 {
		return raw
	}
	// Receive queues responses for the next Process but sends nothing, so
	// the queue does not grow while it is walked.
	for i := range ln.loopQ {
		lp := &ln.loopQ[i]
		if !lp.dropped {
			ln.eng.Receive(lp.buf[:lp.n], &lp.info)
		}
	}
	ln.eng.SettleWrites() // before the buffers are reused
	for i := range ln.loopQ {
		lp := &ln.loopQ[i]
		ln.loopFree = append(ln.loopFree, lp.buf)
		lp.buf = nil
	}
	ln.loopQ = ln.loopQ[:0]
	return true
}
