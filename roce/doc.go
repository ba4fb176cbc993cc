// Package roce carries InfiniBand transport packets in RoCEv2 frames:
// Ethernet (optionally 802.1Q tagged), IPv4 or IPv6, UDP to port 4791, the
// IB packet, and the invariant CRC (ICRC) of IBA Annex 17.
//
// ParseFrame checks a received frame's encapsulation and ICRC, one layer a
// step over typed views of the Ethernet, 802.1Q, IPv4, IPv6 and UDP headers
// (header.go), and returns views of its fields and of the IB packet inside,
// for package ibtransport to parse. Encap builds the headers around an IB
// packet written in place; a transmit path keeps the headers it writes as a
// template (encaptmpl.go) and patches only the lengths and the IPv4
// checksum. They work on caller-owned buffers and allocate nothing, so
// they sit on the per-packet path.
//
// The files: frame.go, encap.go, encaptmpl.go, header.go and icrc.go the
// framing;
// device.go the Device; lane.go an engine's goroutine and receive path;
// txpath.go and loopback.go the transmit paths; tap.go the hook that
// shows each lane's frames to a Tap, such as roce/capture's packet
// capture.
//
// The package also holds RoCEv2 GIDs (IP addresses in GID form), the UDP
// source port a queue pair uses, and the device that joins a Link to the
// transport. Links plug in from their own packages: roce/xdplink over
// AF_XDP on a real interface, roce/memlink in memory for tests. A Device
// runs one engine of package ibtransport per share of the link's receive
// queues (a Splitter, such as an xdplink.Link on a multi-queue interface,
// divides them), each in its own goroutine with the link it drives: a lane.
// The path of one frame: the lane's link receives it, ParseFrame checks it,
// and the lane's engine runs the IB packet.
package roce
