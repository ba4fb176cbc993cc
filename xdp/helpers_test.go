package xdp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/internal/netnstest"
	"github.com/stretchr/testify/require"
)

// udpFrame writes an Ethernet/IP/UDP frame to port 4791 of total length
// size into b and returns it. The payload is a pattern seeded by seq so the
// receiver can check every byte.
func udpFrame(b []byte, size int, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, seq uint32) []byte {
	b = b[:size]
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	var l4 int
	if dst.Is4() {
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		ip := b[14:34]
		ip[0] = 0x45
		ip[1] = 0
		binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
		binary.BigEndian.PutUint16(ip[4:], 0)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = 64
		ip[9] = 17
		ip[10], ip[11] = 0, 0
		s4, d4 := src.As4(), dst.As4()
		copy(ip[12:16], s4[:])
		copy(ip[16:20], d4[:])
		binary.BigEndian.PutUint16(ip[10:], checksum(ip))
		l4 = 34
	} else {
		binary.BigEndian.PutUint16(b[12:], 0x86dd)
		ip := b[14:54]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(size-54))
		ip[6] = 17
		ip[7] = 64
		s16, d16 := src.As16(), dst.As16()
		copy(ip[8:24], s16[:])
		copy(ip[24:40], d16[:])
		l4 = 54
	}
	udp := b[l4 : l4+8]
	binary.BigEndian.PutUint16(udp[0:], 0xc000)
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-l4))
	binary.BigEndian.PutUint16(udp[6:], 0) // RoCEv2 sends UDP checksum 0
	pay := b[l4+8:]
	binary.BigEndian.PutUint32(pay, seq)
	for i := 4; i < len(pay); i++ {
		pay[i] = byte(uint32(i)*7 + seq)
	}
	return b
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// side is one namespace with the steering program attached and one AF_XDP
// socket on queue 0.
type side struct {
	end  *netnstest.End
	prog *bpf.Program
	sock *Socket
}

func setupSide(t *testing.T, e *netnstest.End, cfg Config) *side {
	t.Helper()
	s := &side{end: e}
	err := e.Do(func() (err error) {
		if s.prog, err = bpf.Attach(e.Ifname, bpf.ModeAuto); err != nil {
			return err
		}
		if s.sock, err = Open(e.Ifindex, 0, cfg); err != nil {
			s.prog.Close()
			return err
		}
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.sock.Close()
		s.prog.Close()
	})
	for _, a := range e.Addrs {
		require.NoError(t, s.prog.AddAddr(a.Addr()))
	}
	require.NoError(t, s.prog.SetSocket(0, s.sock.FD()))
	return s
}

// sendFrame copies frame into as many transmit frames as it needs (one,
// with the contiguous layout) and queues them, retrying while the rings are
// full.
func sendFrame(t *testing.T, s *Socket, frame []byte) {
	t.Helper()
	var descs []Desc
	for off := 0; off < len(frame); {
		var d Desc
		var buf []byte
		var ok bool
		for deadline := time.Now().Add(2 * time.Second); ; {
			if d, buf, ok = s.NextTxFrame(); ok {
				break
			}
			require.NoError(t, s.Flush())
			require.False(t, time.Now().After(deadline), "no free transmit frame for 2s")
		}
		c := copy(buf, frame[off:])
		off += c
		if s.cfg.Contiguous {
			descs = s.AppendTx(descs, d, c)
			continue
		}
		d.Len = uint32(c)
		d.SetMore(off < len(frame))
		descs = append(descs, d)
	}
	for sent := 0; sent < len(descs); {
		k, err := s.Transmit(descs[sent:])
		require.NoError(t, err)
		sent += k
		require.NoError(t, s.Flush())
	}
}

// receiveFrames collects n packets (reassembling multi-buffer ones) or
// fails after timeout.
func receiveFrames(t *testing.T, s *Socket, n int, timeout time.Duration) [][]byte {
	t.Helper()
	out, _, _ := receiveFramesSpans(t, s, n, timeout)
	return out
}

// receiveFramesSpans is receiveFrames, also counting the multi-buffer
// packets and those of them whose descriptors were contiguous (Span).
func receiveFramesSpans(t *testing.T, s *Socket, n int, timeout time.Duration) (out [][]byte, multi, contiguous int) {
	t.Helper()
	var cur []byte
	descs := make([]Desc, 64)
	deadline := time.Now().Add(timeout)
	for len(out) < n {
		k := s.Receive(descs)
		if k == 0 {
			if time.Now().After(deadline) {
				st, _ := s.Stats()
				require.FailNowf(t, "timeout", "received %d of %d packets; stats %+v", len(out), n, st)
			}
			s.Wait(10*time.Millisecond, -1)
			continue
		}
		first := 0
		for i, d := range descs[:k] {
			b := s.Frame(d)
			require.NotNil(t, b, "descriptor %+v outside the UMEM", d)
			cur = append(cur, b...)
			if d.More() {
				continue
			}
			if i > first {
				multi++
				if span := s.Span(descs[first : i+1]); span != nil {
					require.Equal(t, cur, span, "Span of %d descriptors differs from their frames", i+1-first)
					contiguous++
				}
			}
			out = append(out, cur)
			cur = nil
			first = i + 1
		}
		require.NoError(t, s.Release(descs[:k]))
	}
	return out, multi, contiguous
}

type bpfStats = bpf.Stats

func waitProg(t *testing.T, s *side, ok func(bpf.Stats) bool) {
	t.Helper()
	var st bpf.Stats
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var err error
		st, err = s.prog.Stats()
		require.NoError(t, err)
		if ok(st) {
			return
		}
	}
	require.FailNowf(t, "timeout", "program counters never matched: %+v", st)
}
