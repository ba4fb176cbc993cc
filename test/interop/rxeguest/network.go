package rxeguest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Network is a Linux bridge with tap devices for guests and one end of a
// veth pair, all in a namespace of their own (BridgeNS); the veth's other
// end (PeerLink) sits in a second namespace (PeerNS) for softnic to bind
// with AF_XDP. Nothing is created in the caller's namespace.
//
//	guest eth0 -- TapN --+
//	                     br0 -- BridgeLink ==veth== PeerLink (PeerNS)
//	guest eth0 -- Tap0 --+
type Network struct {
	BridgeNS   string
	PeerNS     string
	Bridge     string
	Taps       []string
	BridgeLink string
	PeerLink   string
	// PeerAddr is PeerLink's address, if one was asked for.
	PeerAddr netip.Prefix
}

// NetworkConfig shapes NewNetwork.
type NetworkConfig struct {
	// Name prefixes the two namespaces: <Name>-br and <Name>-peer.
	Name string
	// Taps is how many tap devices (guests) to create.
	Taps int
	// PeerAddr, when valid, is assigned to PeerLink. softnic tests binding
	// the link with AF_XDP usually leave it unset or set it for neighbour
	// resolution by the guests' kernels.
	PeerAddr netip.Prefix
	// MTU of the bridge ports; 1500 when zero.
	MTU int
	// PeerQueues is the number of RX and TX queues of each end of the
	// veth pair (1 when zero): softnic runs one engine per queue.
	PeerQueues int
	// TapQueues above 1 makes multi-queue taps, for guests whose
	// Config.Queues is at most this.
	TapQueues int
}

// NewNetwork creates the namespaces and links. Namespaces left over from
// an earlier run with the same name are removed first. Close removes all.
func NewNetwork(ctx context.Context, cfg NetworkConfig) (*Network, error) {
	if cfg.Name == "" {
		return nil, errors.New("network: empty name")
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	n := &Network{
		BridgeNS:   cfg.Name + "-br",
		PeerNS:     cfg.Name + "-peer",
		Bridge:     "br0",
		BridgeLink: "vbr",
		PeerLink:   "vpeer",
		PeerAddr:   cfg.PeerAddr,
	}
	for i := 0; i < cfg.Taps; i++ {
		n.Taps = append(n.Taps, fmt.Sprintf("tap%d", i))
	}
	n.deleteNamespaces()
	mtu := fmt.Sprint(cfg.MTU)
	steps := [][]string{
		{"netns", "add", n.BridgeNS},
		{"netns", "add", n.PeerNS},
		{"-n", n.BridgeNS, "link", "set", "lo", "up"},
		{"-n", n.PeerNS, "link", "set", "lo", "up"},
		// No STP: ports forward at once.
		{"-n", n.BridgeNS, "link", "add", n.Bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
		{"-n", n.BridgeNS, "link", "set", n.Bridge, "mtu", mtu, "up"},
	}
	tapMode := []string{"mode", "tap"}
	if cfg.TapQueues > 1 {
		// qemu opens one file descriptor per queue of such a tap.
		tapMode = append(tapMode, "multi_queue")
	}
	for _, tap := range n.Taps {
		steps = append(steps,
			append([]string{"-n", n.BridgeNS, "tuntap", "add", "dev", tap}, tapMode...),
			[]string{"-n", n.BridgeNS, "link", "set", tap, "mtu", mtu, "master", n.Bridge, "up"})
	}
	queues := fmt.Sprint(max(cfg.PeerQueues, 1))
	steps = append(steps,
		[]string{"-n", n.BridgeNS, "link", "add", n.BridgeLink, "mtu", mtu, "numtxqueues", queues, "numrxqueues", queues, "type", "veth",
			"peer", "name", n.PeerLink, "mtu", mtu, "numtxqueues", queues, "numrxqueues", queues, "netns", n.PeerNS},
		[]string{"-n", n.BridgeNS, "link", "set", n.BridgeLink, "master", n.Bridge, "up"},
		[]string{"-n", n.PeerNS, "link", "set", n.PeerLink, "up"})
	if cfg.PeerAddr.IsValid() {
		steps = append(steps, []string{"-n", n.PeerNS, "addr", "add", cfg.PeerAddr.String(), "dev", n.PeerLink})
	}
	for _, args := range steps {
		if _, err := run(ctx, "", "ip", args...); err != nil {
			n.deleteNamespaces()
			return nil, fmt.Errorf("network %s: %w", cfg.Name, err)
		}
	}
	return n, nil
}

func (n *Network) deleteNamespaces() error {
	var errs []error
	for _, ns := range []string{n.BridgeNS, n.PeerNS} {
		out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// SweepNetworks deletes the namespaces of networks named
// <prefix><pid> whose process no longer runs, left behind by killed tests.
func SweepNetworks(prefix string) error {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("sweep networks: %w", err)
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // still running
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", e.Name(), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// Close deletes both namespaces and with them every link of the network.
func (n *Network) Close() error {
	return n.deleteNamespaces()
}

// Capture is a running tcpdump.
type Capture struct {
	cmd  *exec.Cmd
	done chan error
}

// Capture starts tcpdump on iface in the bridge namespace (the bridge
// itself sees every frame between guests and the veth), writing a pcap to
// file, and returns once tcpdump is listening. filter is a tcpdump
// expression, e.g. "udp port 4791".
func (n *Network) Capture(ctx context.Context, iface, file, filter string) (*Capture, error) {
	args := []string{"netns", "exec", n.BridgeNS, "tcpdump", "-i", iface, "--immediate-mode", "-U", "-n", "-Z", "root", "-w", file}
	if filter != "" {
		args = append(args, strings.Fields(filter)...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("capture: start tcpdump: %w", err)
	}
	c := &Capture{cmd: cmd, done: make(chan error, 1)}
	listening := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !signalled && strings.Contains(sc.Text(), "listening on") {
				close(listening)
				signalled = true
			}
		}
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("tcpdump: %w: %s", err, strings.TrimSpace(log.String()))
		}
		c.done <- err
	}()
	select {
	case <-listening:
		return c, nil
	case err := <-c.done:
		return nil, fmt.Errorf("capture exited early: %v", err)
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("capture: tcpdump did not start listening within 10s")
	}
}

// Stop ends the capture, flushing the file.
func (c *Capture) Stop() error {
	// Frames still in the kernel's capture ring when tcpdump gets SIGINT
	// are lost; give it a moment to drain them.
	time.Sleep(500 * time.Millisecond)
	c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-c.done:
		return err
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		return errors.New("capture: tcpdump did not stop")
	}
}
