package xdp_test

import (
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/softnic/softnic/bpf"
	"github.com/softnic/softnic/xdp"
)

// Receive RoCEv2 frames sent to 192.0.2.1 on eth0 and echo them back
// unchanged (a real responder would rewrite the headers).
func Example() {
	ifc, err := net.InterfaceByName("eth0")
	if err != nil {
		log.Fatal(err)
	}
	prog, err := bpf.Attach(ifc.Name, bpf.ModeAuto)
	if err != nil {
		log.Fatal(err)
	}
	defer prog.Close()
	sock, err := xdp.Open(ifc.Index, 0, xdp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer sock.Close()
	if err := prog.AddAddr(netip.MustParseAddr("192.0.2.1")); err != nil {
		log.Fatal(err)
	}
	if err := prog.SetSocket(sock.Queue(), sock.FD()); err != nil {
		log.Fatal(err)
	}

	rx := make([]xdp.Desc, 64)
	tx := make([]xdp.Desc, 0, 64)
	for {
		if _, err := sock.Wait(time.Second, -1); err != nil {
			log.Fatal(err)
		}
		n := sock.Receive(rx)
		for _, d := range rx[:n] {
			out, buf, ok := sock.NextTxFrame()
			if !ok {
				break // every transmit frame is in flight: drop
			}
			out.Len = uint32(copy(buf, sock.Frame(d)))
			out.SetMore(d.More())
			tx = append(tx, out)
		}
		if err := sock.Release(rx[:n]); err != nil {
			log.Fatal(err)
		}
		queued, err := sock.Transmit(tx)
		if err != nil {
			log.Fatal(err)
		}
		for _, d := range tx[queued:] {
			sock.FreeTxFrame(d) // TX ring full: drop the rest
		}
		tx = tx[:0]
		if err := sock.Flush(); err != nil {
			log.Fatal(err)
		}
	}
}
