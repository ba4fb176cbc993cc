// Package capture writes a packet capture of a roce.Device: the frames
// it sends (as they go to the link, after the ICRC) and receives (as they
// come from the link, before they are parsed), to a classic pcap file, as
// a Tap on each of the device's lanes. Into a regular file, the lanes
// copy their frames to their places in the file's byte stream, which a
// goroutine of the capture's writes out with direct I/O (file.go,
// direct.go); into any other writer (or a file system without direct
// I/O), each lane copies its frames into a ring of its own (ring.go) and
// the goroutine writes the rings out. Either way the lanes never wait for
// the goroutine. Packets between two QPs of the device never reach the
// link and are not captured, as a NIC's loopback is not seen by tcpdump.
//
//	c, err := capture.Start(dev, capture.Config{W: file})
//	if err != nil {
//		return err
//	}
//	defer c.Stop()
package capture
