// Package daemon is softnic's adapter as a standing service: it serves a
// device to local processes through a control socket and shared memory
// (docs/HOST-INTERFACE.md), running their QPs' transport in its own
// engines and placing data straight into their registered memory.
//
// Each connection is a session. Its objects (PDs, MRs, CQs, QPs) are its
// own: handles index the session's tables only. Work queues and completion
// queues are memfd rings the client maps; the device's first engine takes
// posted work on every pass (roce.HostQueues), and the client's doorbell
// eventfd wakes it when it sleeps. When the connection ends (the process
// exited or was killed), the session's QPs are destroyed and its regions
// deregistered, and its memory is not touched again (internal/procmem).
//
//	srv, err := daemon.Serve(dev, daemon.Config{Socket: "/run/softnic/softnic_eth0.sock"})
//	if err != nil {
//		return err
//	}
//	defer srv.Close()
package daemon
