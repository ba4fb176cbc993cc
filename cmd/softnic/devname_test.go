package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckDeviceName(t *testing.T) {
	for _, good := range []string{"rxe0", "mlx5_0", "softnic0", "softnic_eth0", "a", "0", "dev-1.x", strings.Repeat("n", maxDeviceName)} {
		assert.NoError(t, checkDeviceName(good), good)
	}
	for _, bad := range []string{"", ".", "..", "_x", "-d", ".hidden", "a/b", "a b", "a:b", "a%d", "é", "x\x00",
		strings.Repeat("n", maxDeviceName+1)} {
		assert.Error(t, checkDeviceName(bad), "%q", bad)
	}
	// The longest name's device file name fits libibverbs' 63 bytes.
	assert.LessOrEqual(t, len(cdevName("/run/softnic", strings.Repeat("n", maxDeviceName))), 63)
}

func TestParseServeSpecs(t *testing.T) {
	specs, err := parseServeSpecs([]string{"eth0", "eth1:rxe0", "eth2:softnic_eth0x"})
	require.NoError(t, err)
	assert.Equal(t, []serveSpec{{"eth0", "softnic_eth0"}, {"eth1", "rxe0"}, {"eth2", "softnic_eth0x"}}, specs)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{":rxe0"}, "no interface"},
		{[]string{"eth0:"}, "empty device name"},
		{[]string{"eth0:a/b"}, "'/'"},
		{[]string{"eth0:x", "eth0:y"}, "interface eth0 given twice"},
		{[]string{"eth0:x", "eth1:x"}, "device name x given twice"},
		{[]string{"eth1", "eth0:softnic_eth1"}, "device name softnic_eth1 given twice"},
	} {
		_, err := parseServeSpecs(c.args)
		assert.ErrorContains(t, err, c.want, "%q", c.args)
	}
}

func TestResolveDevice(t *testing.T) {
	devs := []servedDevice{
		{name: "rxe0", iface: "veth0", cdev: "rxe0.1", here: true},
		{name: "softnic_veth1", iface: "veth1", cdev: "softnic_veth1.1", here: true},
		{name: "veth1", iface: "eth9", cdev: "veth1.1", here: true}, // a device named as another's interface
		{name: "far", iface: "veth0", cdev: "far.1"},
	}
	for _, c := range []struct{ arg, want string }{
		{"rxe0", "rxe0"}, {"veth0", "rxe0"}, {"softnic_veth1", "softnic_veth1"},
		{"veth1", "veth1"}, // a name first
		{"eth9", "veth1"},
	} {
		d, err := resolveDevice(devs, c.arg, false)
		require.NoError(t, err, c.arg)
		assert.Equal(t, c.want, d.name, c.arg)
	}
	_, err := resolveDevice(devs, "far", false)
	assert.ErrorContains(t, err, "device far serves veth0 in another network namespace")
	assert.NotErrorIs(t, err, errNotServed)
	d, err := resolveDevice(devs, "far", true)
	require.NoError(t, err)
	assert.Equal(t, "far", d.name)
	_, err = resolveDevice(devs, "nothing", true)
	assert.ErrorIs(t, err, errNotServed)
	assert.Equal(t, "rxe0 (veth0), far (veth0, another network namespace)", deviceList([]servedDevice{devs[0], devs[3]}))
}
