package roce

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// maxPayloadHeaders is the largest header before a payload: BTH + RETH +
// ImmDt (WRITE ONLY with immediate).
const maxPayloadHeaders = header.BTHLen + header.RETHLen + header.ImmDtLen

// Path implements ibtransport.Port: it prepares transmission to av, as
// connecting a QP does. A destination among the device's own addresses gets
// a loopPath, any other a path over the link, with the neighbour resolved
// and the MTU checked now, off the packet path.
func (ln *lane) Path(av *ibv.AddressVector, qpn uint32, pathMTU int) (ibtransport.TxPath, error) {
	t := ln.d.table.Load()
	if int(av.SGIDIndex) >= len(t.addrs) || !t.addrs[av.SGIDIndex].IsValid() {
		return nil, fmt.Errorf("source GID index %d of %d: %w", av.SGIDIndex, len(t.addrs), ibv.ErrInvalidArgument)
	}
	src := t.addrs[av.SGIDIndex]
	dst := AddrFromGID(av.DGID)
	if src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("GIDs %v and %v: %w", src, dst, ErrAddressFamily)
	}
	encap := Encap{SrcMAC: ln.d.mac, Src: src, Dst: dst, TrafficClass: ln.d.trafficClass(av.TrafficClass),
		CNPTrafficClass: ln.d.cnpTrafficClass(), HopLimit: av.HopLimit, FlowLabel: av.FlowLabel, SrcPort: SourcePort(qpn),
		RxeFlushICRC: ln.d.rxeFlushICRC}
	if encap.HopLimit == 0 {
		encap.HopLimit = 64
	}
	if i := t.index(GIDFromAddr(dst)); i >= 0 {
		return ln.loopPath(t, int(av.SGIDIndex), i, encap), nil
	}
	var loop *loopPath
	if av.DGID.IsMulticast() {
		// To the group's MAC address, and to the device's own QPs.
		encap.DstMAC = MulticastMAC(dst)
		loop = ln.loopPath(t, int(av.SGIDIndex), ln.d.mcastGIDIndex(av.DGID), encap)
		loop.info.DGID = av.DGID
	} else {
		var err error
		if encap.DstMAC, err = ln.d.neighbor(dst); err != nil {
			return nil, err
		}
	}
	// The frames must hold the path MTU's packets; that they fit the
	// wire's MTU is the caller's choice, as with rxe and mlx5, which take
	// any path MTU up to 4096 (a link whose MTU dropped since, or a peer
	// with a smaller one, drops the larger packets).
	hl := encap.HeaderLen()
	maxIB := ln.maxMTU() - (hl - ethHeaderLen) - header.ICRCLen
	if maxPayloadHeaders+pathMTU > maxIB {
		return nil, fmt.Errorf("path MTU %d does not fit the link's frames (MTU %d): %w", pathMTU, ln.maxMTU(), ibv.ErrInvalidArgument)
	}
	return &path{ln: ln, encap: encap, tmpl: encap.template(), hl: hl, maxIB: maxIB, loop: loop}, nil
}

// ActiveMTU implements ibtransport.Port: the largest IB MTU the link
// carries, as rxe chooses it.
func (ln *lane) ActiveMTU() int { return ActiveIBMTU(ln.link.MTU()) }

// maxMTU is the largest MTU the link's frames hold (MTULink), its MTU
// for a link whose MTU does not change.
func (ln *lane) maxMTU() int { return MaxMTU(ln.link) }

// neighbor returns the MAC address to send to dst: SetNeighbor's entry,
// else what DeviceConfig.Resolve finds (then kept as an entry), else the
// broadcast address.
func (d *Device) neighbor(dst netip.Addr) ([6]byte, error) {
	d.neighMu.Lock()
	mac, ok := d.neigh[dst]
	d.neighMu.Unlock()
	switch {
	case ok:
		return mac, nil
	case d.resolve != nil:
		// Runs on the engine goroutine, during ModifyQP to RTR: resolution
		// is not on the packet path.
		mac, err := d.resolve(dst)
		if err != nil {
			return mac, fmt.Errorf("resolve %v: %w", dst, err)
		}
		d.SetNeighbor(dst, mac)
		return mac, nil
	}
	return [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, nil
}

// path sends one QP's packets: it caches the QP's encapsulation.
type path struct {
	ln    *lane
	encap Encap
	tmpl  frameTemplate // encap's headers, laid out
	hl    int
	maxIB int
	// loop, on a path to a multicast group, takes a copy of each packet
	// for the device's own QPs attached to the group.
	loop *loopPath
	// raw is set on the path of raw packet QPs: its packets are whole
	// frames (raw.go).
	raw bool
}

// Buffer implements ibtransport.TxPath: room after the headers in a TX frame.
func (p *path) Buffer() []byte {
	ln := p.ln
	if ln.txBuf == nil {
		if k := len(ln.spare); k > 0 {
			ln.txBuf, ln.spare = ln.spare[k-1], ln.spare[:k-1]
		} else if ln.txBuf = ln.link.TxFrame(); ln.txBuf == nil {
			ln.ctr.TxNoBuffer.Add(1)
			return nil
		}
	}
	return ln.txBuf[p.hl : p.hl+p.maxIB]
}

// Send implements ibtransport.TxPath.
func (p *path) Send(n int) {
	ln := p.ln
	ln.unflushed += p.hl + n
	if ln.holding() {
		p.hold(n)
	} else {
		buf := ln.txBuf
		ln.txBuf = nil
		p.finish(buf, n)
	}
	// Kick the link in the middle of a long pass too: the peer starts on
	// the first frames while this side builds the rest, and it does not
	// fall asleep waiting for a whole pass (a wake-up of a sleeping peer
	// makes this side's sendto slower). Small frames still go in one kick
	// per pass.
	if ln.unflushed >= flushBytes {
		ln.release()
		ln.link.Flush()
		ln.unflushed = 0
	}
}

// finish completes the frame in buf around its n-byte IB packet and queues
// it on the link; a frame that cannot be finished is kept for the next.
func (p *path) finish(buf []byte, n int) {
	ln := p.ln
	if p.raw {
		ln.finishRaw(buf, n)
		return
	}
	l, err := p.tmpl.finish(&p.encap, buf, n)
	if err != nil {
		ln.ctr.TxErrors.Add(1)
		ln.spare = append(ln.spare, buf)
		return
	}
	if p.loop != nil && ln.d.group.McastAttached(p.loop.info.DGID) {
		ln.loopCopy(p.loop, buf[p.hl:p.hl+n]) // its payload read by now
	}
	ln.tapFrame(buf[:l])
	ln.link.Send(buf[:l])
	ln.ctr.TxFrames.Add(1)
}

// flushBytes is how many bytes of frames Send queues before it kicks the
// link, even in the middle of a pass.
const flushBytes = 128 << 10
