package roce

import "github.com/softnic/softnic/ibtransport"

// Raw packet QPs' frames: their path lends a whole TX frame and queues
// what the QP gathered into it unchanged. As a ConnectX does, a frame to
// the device's own MAC address never reaches the link, and one to it or
// to a group address is also looped back to the device's flows (the frame
// a raw QP sends reaches another raw QP of the same port): a copy waits
// in the lane's rawLoopQ until the pass's loopback delivery.

// rawLoopBuffers is how many looped-back raw frames may wait at once.
const rawLoopBuffers = 64

// RawPath implements ibtransport.RawPort.
func (ln *lane) RawPath() ibtransport.TxPath {
	return &path{ln: ln, raw: true, maxIB: ln.maxRawFrame()}
}

// maxRawFrame is the longest frame a raw QP sends: the link's largest
// MTU of IP packet (MaxMTU) behind an Ethernet header and one VLAN tag.
func (ln *lane) maxRawFrame() int { return ln.maxMTU() + ethHeaderLen + vlanTagLen }

// finishRaw queues the n-byte frame in buf, a raw QP's, on the link and,
// for the device's own flows, into the loopback queue.
func (ln *lane) finishRaw(buf []byte, n int) {
	frame := buf[:n]
	local := [6]byte(frame[0:6]) == ln.d.mac
	if (local || frame[0]&1 != 0) && ln.d.flows.table.Load() != nil {
		ln.loopRaw(frame)
	}
	ln.ctr.TxRaw.Add(1)
	if local {
		ln.spare = append(ln.spare, buf)
		return
	}
	ln.tapFrame(frame)
	ln.link.Send(frame)
	ln.ctr.TxFrames.Add(1)
}

// loopRaw copies frame into the raw loopback queue; with no buffer free
// the copy is dropped and counted.
func (ln *lane) loopRaw(frame []byte) {
	if ln.rawLoopFree == nil && ln.rawLoopQ == nil {
		size := ln.maxRawFrame()
		backing := make([]byte, rawLoopBuffers*size)
		for j := range rawLoopBuffers {
			ln.rawLoopFree = append(ln.rawLoopFree, backing[j*size:(j+1)*size:(j+1)*size])
		}
		ln.rawLoopQ = make([][]byte, 0, rawLoopBuffers)
	}
	k := len(ln.rawLoopFree)
	if k == 0 {
		ln.ctr.LoopbackRawDrops.Add(1)
		return
	}
	b := ln.rawLoopFree[k-1]
	ln.rawLoopFree = ln.rawLoopFree[:k-1]
	ln.rawLoopQ = append(ln.rawLoopQ, b[:copy(b, frame)])
	ln.ctr.LoopbackRaw.Add(1)
}

// deliverRawLoop steers the looped-back raw frames to the device's flows;
// it reports whether there were any.
func (ln *lane) deliverRawLoop() bool {
	if len(ln.rawLoopQ) == 0 {
		return false
	}
	for _, f := range ln.rawLoopQ {
		ln.steerRaw(f)
	}
	ln.eng.SettleWrites() // before the buffers are reused
	for i, f := range ln.rawLoopQ {
		ln.rawLoopFree = append(ln.rawLoopFree, f[:cap(f)])
		ln.rawLoopQ[i] = nil
	}
	ln.rawLoopQ = ln.rawLoopQ[:0]
	return true
}
