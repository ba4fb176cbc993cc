// Package rdmacm connects queue pairs the way librdmacm does: IDs bound to
// IP addresses and ports, a listener that hears connect requests, and
// events (ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST, ESTABLISHED,
// REJECTED, UNREACHABLE, DISCONNECTED, TIMEWAIT_EXIT) on an event channel.
//
// Underneath, every softnic device runs the InfiniBand connection manager
// on its QP1 (package ibtransport/cm): a connect is a REQ/REP/RTU exchange
// of management datagrams with the peer's QP1, its service ID the port
// (RDMA_PS_TCP), its private data starting with the rdma_cm header that
// carries both IP addresses, as Linux's rdma_cm sends it, so the peer may
// be rdma_rxe, a ConnectX or softnic. This package moves the QPs it
// connects through INIT, RTR and RTS with the attributes the exchange
// negotiated (PSNs, QPNs, MTU, READ resources, retry counts), and to ERR
// when the connection ends.
//
// A CM holds the devices IDs may use (librdmacm's device list): an ID
// takes the device whose GID table has its local address.
//
// Over a device a softnic daemon serves (package daemon/client's
// DialDevice), the CM is remote: its IDs run in the daemon, as
// librdmacm's run in the kernel through rdma_ucm (docs/HOST-INTERFACE.md,
// "The connection manager"), with the same API and events; an ID's QP is
// a QP of the daemon session like any other. Such a device is then the
// CM's only one.
//
// Where IDs run is the CM's backend (backend.go). The in-process one is
// this package's (inproc*.go). The daemon's lives with the daemon's
// client, in package daemon/client (rdmacm*.go): that device's verbs
// backend is a BackendProvider, which New asks for the CM's backend, so
// that this package imports nothing of the daemon's.
package rdmacm
