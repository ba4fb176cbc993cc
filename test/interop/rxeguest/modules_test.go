package rxeguest

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseModinfoDepends(t *testing.T) {
	modinfo := []byte("license=GPL\x00depends=ib_uverbs,ib_core,ip6_udp_tunnel,udp-tunnel\x00retpoline=Y\x00name=rdma_rxe\x00")
	require.Equal(t, []string{"ib_uverbs", "ib_core", "ip6_udp_tunnel", "udp_tunnel"}, parseModinfoDepends(modinfo))
	require.Empty(t, parseModinfoDepends([]byte("depends=\x00name=x\x00")))
}

func fakeDepends(graph map[string][]string) func(string) ([]string, error) {
	return func(path string) ([]string, error) {
		deps, ok := graph[path]
		if !ok {
			return nil, fmt.Errorf("no module at %s", path)
		}
		return deps, nil
	}
}

func names(mods []kernelModule) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.name)
	}
	return out
}

func TestModuleLoadOrderPutsDependenciesFirst(t *testing.T) {
	index := map[string]string{
		"rdma_rxe": "rdma_rxe", "ib_uverbs": "ib_uverbs", "ib_core": "ib_core",
		"udp_tunnel": "udp_tunnel", "virtio_net": "virtio_net", "failover": "failover",
	}
	graph := map[string][]string{
		"rdma_rxe":   {"ib_uverbs", "ib_core", "udp_tunnel"},
		"ib_uverbs":  {"ib_core"},
		"ib_core":    nil,
		"udp_tunnel": nil,
		"virtio_net": {"failover"},
		"failover":   nil,
	}
	order, err := moduleLoadOrder(index, []string{"virtio_net", "rdma_rxe", "ib_core"}, fakeDepends(graph))
	require.NoError(t, err)
	require.Equal(t, []string{"failover", "virtio_net", "ib_core", "ib_uverbs", "udp_tunnel", "rdma_rxe"}, names(order))
}

func TestModuleLoadOrderErrors(t *testing.T) {
	_, err := moduleLoadOrder(map[string]string{"a": "a"}, []string{"b"}, fakeDepends(nil))
	require.ErrorContains(t, err, "module b not found")

	_, err = moduleLoadOrder(map[string]string{"a": "a"}, []string{"a"}, fakeDepends(map[string][]string{"a": {"c"}}))
	require.ErrorContains(t, err, "module c (needed by a) not found")

	cyclic := map[string][]string{"a": {"b"}, "b": {"a"}}
	_, err = moduleLoadOrder(map[string]string{"a": "a", "b": "b"}, []string{"a"}, fakeDepends(cyclic))
	require.ErrorContains(t, err, "cycle")
}

func TestMACForIsStableAndLocal(t *testing.T) {
	mac := MACFor(netip.MustParseAddr("10.77.0.11"))
	require.Equal(t, net.HardwareAddr{0x52, 0x54, 10, 77, 0, 11}, mac)
	require.NotZero(t, mac[0]&0x02, "locally administered bit")
	require.Zero(t, mac[0]&0x01, "unicast")
}
