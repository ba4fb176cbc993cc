package cm_test

import (
	"fmt"
	"log"

	"github.com/softnic/softnic/ibtransport/cm"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/ibtransport/mad"
)

// Two Managers joined by a channel standing in for QP1 set up a connection:
// REQ, REP, RTU.
func Example() {
	var client, server *cm.Manager
	wire := make(chan func(), 16)
	sendTo := func(peer **cm.Manager) func(ibv.AddressVector, mad.MAD) error {
		return func(_ ibv.AddressVector, m mad.MAD) error {
			msg := append(mad.MAD(nil), m...) // Send must not keep m
			wire <- func() { (*peer).Receive(ibv.AddressVector{}, msg) }
			return nil
		}
	}
	client = cm.New(cm.Config{CAGUID: 1, Send: sendTo(&server)})
	server = cm.New(cm.Config{CAGUID: 2, Send: sendTo(&client)})
	go func() {
		for deliver := range wire {
			deliver()
		}
	}()
	defer close(wire)
	defer client.Close()
	defer server.Close()

	established := make(chan struct{})
	_, err := server.Listen(mad.ServiceID(mad.PortSpaceTCP, 7174), func(e cm.Event) {
		switch e.Type {
		case cm.EventREQReceived:
			// Here rdmacm would create the QP and move it to RTR.
			if err := e.Conn.Accept(cm.REPParams{LocalQPN: 18, StartingPSN: 100}); err != nil {
				log.Print(err)
			}
		case cm.EventRTUReceived:
			fmt.Println("server: established")
			close(established)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Connect(cm.REQParams{
		ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7174),
		LocalQPN:  17, StartingPSN: 200, PathMTU: ibv.MTU1024,
		Transport: mad.TransportRC, RetryCount: 7, RNRRetryCount: 7,
	}, func(e cm.Event) {
		if e.Type == cm.EventREPReceived {
			fmt.Printf("client: server QP %d starts at PSN %d\n", e.RemoteQPN, e.StartingPSN)
			// Here rdmacm would move the QP to RTR and RTS.
			if err := e.Conn.ReadyToUse(nil); err != nil {
				log.Print(err)
			}
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	<-established
	// Output:
	// client: server QP 18 starts at PSN 100
	// server: established
}
