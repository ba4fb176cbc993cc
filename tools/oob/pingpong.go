package oob

import (
	"fmt"
	"net"
	"time"
)

// PingpongMsgLen is the size of ibv_rc_pingpong's address message:
// sizeof "0000:000000:000000:00000000000000000000000000000000" (rc_pingpong.c,
// pp_client_exch_dest), so 51 characters and the NUL.
const PingpongMsgLen = 52

// pingpongDone is what the client writes after reading the server's address
// (write(sockfd, "done", sizeof "done"): five bytes with the NUL).
var pingpongDone = []byte("done\x00")

// PingpongDest is one side's address as ibv_rc_pingpong exchanges it.
type PingpongDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID [16]byte
}

func (d PingpongDest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, gidText(d.GID))
}

// Format returns the 52-byte message: sprintf("%04x:%06x:%06x:%s", lid, qpn,
// psn, gid) where gid is gid_to_wire_gid's text (pingpong.c): each of the
// four 32-bit words of the raw GID printed with %08x after htobe32, which is
// the 16 raw bytes in order as 32 hex digits.
func (d PingpongDest) Format() ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return nil, fmt.Errorf("%w: QPN %#x or PSN %#x above 24 bits", ErrFieldRange, d.QPN, d.PSN)
	}
	b := make([]byte, PingpongMsgLen)
	putHex(b[0:4], uint64(d.LID))
	b[4] = ':'
	putHex(b[5:11], uint64(d.QPN))
	b[11] = ':'
	putHex(b[12:18], uint64(d.PSN))
	b[18] = ':'
	for i, g := range d.GID {
		putHex(b[19+2*i:21+2*i], uint64(g))
	}
	b[51] = 0
	return b, nil
}

// ParsePingpongDest parses a message Format produces. It is stricter than
// rc_pingpong's sscanf("%x:%x:%x:%s"): fields must have exactly the widths
// the tool prints, and the message must end in its NUL.
func ParsePingpongDest(b []byte) (PingpongDest, error) {
	var d PingpongDest
	if len(b) != PingpongMsgLen {
		return d, fmt.Errorf("%w: pingpong address is %d bytes, want %d", ErrMessageLength, len(b), PingpongMsgLen)
	}
	if b[4] != ':' || b[11] != ':' || b[18] != ':' || b[51] != 0 {
		return d, fmt.Errorf("%w: pingpong address %q lacks its separators", ErrMessageFormat, b)
	}
	lid, err := hexField(b[0:4], "LID")
	if err != nil {
		return d, err
	}
	qpn, err := hexField(b[5:11], "QPN")
	if err != nil {
		return d, err
	}
	psn, err := hexField(b[12:18], "PSN")
	if err != nil {
		return d, err
	}
	for i := range d.GID {
		v, err := hexField(b[19+2*i:21+2*i], "GID")
		if err != nil {
			return d, err
		}
		d.GID[i] = byte(v)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// PingpongClient runs the client side of ibv_rc_pingpong's exchange
// (pp_client_exch_dest): send the local address, read the server's, send
// "done". The caller then connects its QP and closes conn.
func PingpongClient(conn net.Conn, local PingpongDest, timeout time.Duration) (PingpongDest, error) {
	s := newStream(conn, Client, timeout)
	msg, err := local.Format()
	if err != nil {
		return PingpongDest{}, err
	}
	if err := s.write("pingpong address", msg); err != nil {
		return PingpongDest{}, err
	}
	remote, err := s.readPingpongDest()
	if err != nil {
		return PingpongDest{}, err
	}
	if err := s.write("done", pingpongDone); err != nil {
		return PingpongDest{}, err
	}
	return remote, nil
}

// PingpongServer runs the server side (pp_server_exch_dest): read the
// client's address, call connect with it (the tool moves its QP to RTR and
// RTS before answering, so the client's first send finds it ready), send
// the local address, and wait for "done".
func PingpongServer(conn net.Conn, local PingpongDest, connect func(remote PingpongDest) error, timeout time.Duration) (PingpongDest, error) {
	s := newStream(conn, Server, timeout)
	msg, err := local.Format()
	if err != nil {
		return PingpongDest{}, err
	}
	remote, err := s.readPingpongDest()
	if err != nil {
		return PingpongDest{}, err
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return remote, fmt.Errorf("oob: connect to remote QP: %w", err)
		}
	}
	if err := s.write("pingpong address", msg); err != nil {
		return remote, err
	}
	done := make([]byte, len(pingpongDone))
	if err := s.read("done", done); err != nil {
		return remote, err
	}
	if string(done) != string(pingpongDone) {
		return remote, fmt.Errorf("%w: got %q", ErrNotDone, done)
	}
	return remote, nil
}

// readPingpongDest reads and parses the peer's address message.
func (s *stream) readPingpongDest() (PingpongDest, error) {
	buf := make([]byte, PingpongMsgLen)
	if err := s.read("pingpong address", buf); err != nil {
		return PingpongDest{}, err
	}
	return ParsePingpongDest(buf)
}
