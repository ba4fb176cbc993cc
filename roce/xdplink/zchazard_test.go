package xdplink

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSysfs makes a sysfs tree with eth0 bound to driver, and
// virtio_net's module directory with an initstate if loadable.
func fakeSysfs(t *testing.T, driver string, loadable bool) string {
	root := t.TempDir()
	dev := filepath.Join(root, "devices/pci0000:00/0000:00:03.0/virtio1")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "class/net/eth0"), 0o755))
	require.NoError(t, os.MkdirAll(dev, 0o755))
	require.NoError(t, os.Symlink(dev, filepath.Join(root, "class/net/eth0/device")))
	if driver != "" {
		drv := filepath.Join(root, "bus/virtio/drivers", driver)
		require.NoError(t, os.MkdirAll(drv, 0o755))
		require.NoError(t, os.Symlink(drv, filepath.Join(dev, "driver")))
	}
	mod := filepath.Join(root, "module/virtio_net")
	require.NoError(t, os.MkdirAll(mod, 0o755))
	if loadable {
		require.NoError(t, os.WriteFile(filepath.Join(mod, "initstate"), []byte("live\n"), 0o644))
	}
	return root
}

func TestZeroCopyHazard(t *testing.T) {
	for _, tc := range []struct {
		name, driver string
		loadable     bool
		want         bool
	}{
		{"virtio_net module", "virtio_net", true, true},
		{"virtio_net built in", "virtio_net", false, false},
		{"another driver", "ice", true, false},
		{"no driver", "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := sysfsRoot
			sysfsRoot = fakeSysfs(t, tc.driver, tc.loadable)
			defer func() { sysfsRoot = old }()
			got := zeroCopyHazard("eth0")
			if tc.want {
				assert.Contains(t, got, "virtio_net is a loadable module")
			} else {
				assert.Empty(t, got)
			}
			assert.Empty(t, zeroCopyHazard("nosuch0"), "an interface sysfs does not have")
		})
	}
}
