package rxeguest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNetArgs checks qemu's eth0 options: one queue pair by default, and
// with Queues a multiqueue tap and device with a vector per queue, with
// AccessPlatform a modern device offering VIRTIO_F_ACCESS_PLATFORM.
func TestNetArgs(t *testing.T) {
	cfg := Config{Tap: "tap0", Queues: 1, MAC: MACFor(netip.MustParseAddr("10.77.0.11"))}
	require.Equal(t, []string{"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:0a:4d:00:0b"}, netArgs(cfg))
	cfg.Queues = 4
	require.Equal(t, []string{"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no,queues=4",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:0a:4d:00:0b,mq=on,vectors=10"}, netArgs(cfg))
	cfg.AccessPlatform = true
	require.Equal(t, []string{"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no,queues=4",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:0a:4d:00:0b,mq=on,vectors=10,disable-legacy=on,iommu_platform=on"}, netArgs(cfg))
}
