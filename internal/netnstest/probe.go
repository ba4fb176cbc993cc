package netnstest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"
)

// Ping sends one ICMP (or ICMPv6) echo request from the end's namespace to
// dst and waits up to timeout for the matching reply. It uses a raw socket,
// so it needs no ping binary but does need CAP_NET_RAW.
func (e *End) Ping(dst netip.Addr, timeout time.Duration) error {
	network, reqType, replyType := "ip4:icmp", byte(8), byte(0)
	if dst.Is6() {
		network, reqType, replyType = "ip6:ipv6-icmp", 128, 129
	}
	var conn net.PacketConn
	if err := e.Do(func() (err error) {
		conn, err = net.ListenPacket(network, "")
		return err
	}); err != nil {
		return fmt.Errorf("ping %v from %s: %w", dst, e.Namespace, err)
	}
	defer conn.Close()

	id := uint16(os.Getpid())
	seq := uint16(pairSeq.Add(1))
	msg := make([]byte, 8+32)
	msg[0] = reqType
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	copy(msg[8:], "softnic netnstest ping payload..")
	if dst.Is4() { // the kernel fills in the ICMPv6 checksum itself
		binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
	}
	deadline := time.Now().Add(timeout)
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := conn.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("ping %v from %s: send: %w", dst, e.Namespace, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("ping %v from %s: no reply: %w", dst, e.Namespace, err)
		}
		src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		r := buf[:n]
		if src.Unmap() == dst && n >= 8 && r[0] == replyType &&
			binary.BigEndian.Uint16(r[4:]) == id && binary.BigEndian.Uint16(r[6:]) == seq {
			if !bytes.Equal(r[8:], msg[8:]) {
				return fmt.Errorf("ping %v from %s: reply payload differs", dst, e.Namespace)
			}
			return nil
		}
	}
}

func inetChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TCPEcho listens on addr (port chosen by the kernel) inside server's
// namespace, connects from client's namespace, sends payload and checks the
// server echoes it back unchanged, all within timeout.
func TCPEcho(server, client *End, addr netip.Addr, payload []byte, timeout time.Duration) error {
	var ln net.Listener
	if err := server.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		return fmt.Errorf("tcp listen in %s: %w", server.Namespace, err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, len(payload))
		if _, err := io.ReadFull(c, buf); err != nil {
			srvErr <- err
			return
		}
		_, err = c.Write(buf)
		srvErr <- err
	}()
	var conn net.Conn
	dialer := net.Dialer{Timeout: timeout}
	if err := client.Do(func() (err error) {
		conn, err = dialer.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		return fmt.Errorf("tcp dial %v from %s: %w", ln.Addr(), client.Namespace, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(payload); err != nil {
		return fmt.Errorf("tcp write: %w", err)
	}
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("tcp read echo: %w", err)
	}
	if err := <-srvErr; err != nil {
		return fmt.Errorf("tcp server: %w", err)
	}
	if !bytes.Equal(got, payload) {
		return errors.New("tcp echo differs from what was sent")
	}
	return nil
}
