package main

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/roce/xdplink"
)

func TestDevinfoLayout(t *testing.T) {
	mac := [6]byte{0x52, 0x54, 0x0a, 0x42, 0x00, 0x0b}
	nd := &xdplink.Netdev{Name: "eth0", MTU: 1500, MAC: mac, Up: true,
		GIDs: []netip.Addr{roce.DefaultGID(mac), netip.MustParseAddr("10.66.0.11")}}
	out := formatDevinfo(nd, "softnic_eth0", true)
	assert.Contains(t, out, "hca_id:\tsoftnic_eth0\n")
	// The lines an rdma_rxe device on the same MAC and address prints
	// (ibv_devinfo -v from rdma-core 44 in the interop guest).
	for _, line := range []string{
		"\tnode_guid:\t\t\t5054:0aff:fe42:000b\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tmax_mtu:\t\t4096 (5)\n",
		"\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tGID[  0]:\t\tfe80::5054:aff:fe42:b, RoCE v2\n",
		"\t\t\tGID[  1]:\t\t::ffff:10.66.0.11, RoCE v2\n",
	} {
		assert.Contains(t, out, line)
	}
	nd.MTU, nd.Up = 9000, false
	out = formatDevinfo(nd, "rxe0", false)
	assert.Contains(t, out, "hca_id:\trxe0\n")
	assert.Contains(t, out, "active_mtu:\t\t4096 (5)")
	assert.Contains(t, out, "PORT_DOWN (1)")
	assert.NotContains(t, out, "GID[")
}
