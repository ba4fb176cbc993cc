package xdp

import "golang.org/x/sys/unix"

// Multi-buffer (XDP_USE_SG): a packet longer than a chunk travels as
// several descriptors, all but the last with XDP_PKT_CONTD set.

// Desc describes one UMEM buffer on a ring; it has the layout of the
// kernel's struct xdp_desc.
type Desc struct {
	Addr    uint64 // offset of the data in the UMEM
	Len     uint32
	Options uint32
}

// More reports whether the packet continues in the next descriptor
// (multi-buffer, XDP_PKT_CONTD).
func (d Desc) More() bool { return d.Options&unix.XDP_PKT_CONTD != 0 }

// SetMore marks (or unmarks) the descriptor as continued by the next one.
func (d *Desc) SetMore(more bool) {
	if more {
		d.Options |= unix.XDP_PKT_CONTD
	} else {
		d.Options &^= unix.XDP_PKT_CONTD
	}
}

// unalignedAddr turns an address the kernel reports in unaligned chunk
// mode (the data's offset in the top bits, see unalignedOffsetShift) into
// a plain UMEM offset. Aligned addresses have no top bits and pass as they
// are.
func unalignedAddr(addr uint64) uint64 {
	return addr&(1<<unalignedOffsetShift-1) + addr>>unalignedOffsetShift
}

// Span returns the bytes of a multi-buffer packet's descriptors when each
// continues where the previous one ended, as they do with the contiguous
// layout unless the kernel reused a buffer out of order; otherwise nil.
func (s *Socket) Span(descs []Desc) []byte {
	if len(descs) == 0 {
		return nil
	}
	end := descs[0].Addr
	for _, d := range descs {
		if d.Addr != end {
			return nil
		}
		end += uint64(d.Len)
	}
	if end > uint64(len(s.umem)) || end < descs[0].Addr {
		return nil
	}
	return s.umem[descs[0].Addr:end:end]
}

// AppendTx appends to descs the descriptors that send the length bytes
// built at the start of d, a frame from NextTxFrame: one descriptor, or
// with the contiguous layout one per chunk's worth, all but the last with
// More set.
func (s *Socket) AppendTx(descs []Desc, d Desc, length int) []Desc {
	chunk := s.cfg.FrameSize
	for {
		n := min(length, chunk)
		length -= n
		nd := Desc{Addr: d.Addr, Len: uint32(n)}
		nd.SetMore(length > 0)
		descs = append(descs, nd)
		if length <= 0 {
			return descs
		}
		d.Addr += uint64(n)
	}
}
