package rdmacm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// The in-process backend: a CM's IDs run on the IB CM of its devices
// (their QP1) in this process, and hold the ports they are bound to here.

// inprocCM is the in-process backend of a CM.
type inprocCM struct {
	front *CM
	cfg   Config

	mu    sync.Mutex
	ports map[netip.AddrPort]*inprocID // bound IDs; an unspecified address binds every device's
}

func newInprocCM(front *CM, cfg Config) *inprocCM {
	return &inprocCM{front: front, cfg: cfg, ports: map[netip.AddrPort]*inprocID{}}
}

// inprocChannel is an event channel's in-process half: the channel
// itself, which the IDs queue their events on.
type inprocChannel struct{ ch *EventChannel }

// Close does nothing: nothing but the channel holds its events.
func (inprocChannel) Close() {}

// OpenChannel keeps no post: an ID queues on whichever channel it was
// last migrated to, under that channel's lock (inprocID.post).
func (c *inprocCM) OpenChannel(ch *EventChannel, _ func(Event)) ChannelBackend {
	return inprocChannel{ch}
}

func (c *inprocCM) CreateID(front *ID, chb ChannelBackend) (IDBackend, error) {
	ch, ok := chb.(inprocChannel)
	if !ok {
		return nil, fmt.Errorf("create ID: channel of another CM: %w", ErrInvalidArgument)
	}
	id := &inprocID{front: front, c: c, ps: front.PortSpace()}
	id.ch.Store(ch.ch)
	return id, nil
}

// device returns the device whose GID table holds a, and a's GID index.
func (c *inprocCM) device(a netip.Addr) (*verbs.Device, int, error) {
	g := roce.GIDFromAddr(a)
	for _, d := range c.cfg.Devices {
		for i, dg := range d.GIDTable() {
			if dg == g {
				return d, i, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("%v: %w", a, ErrNoDevice)
}

// route returns the local address that reaches dst.
func (c *inprocCM) route(dst netip.Addr) (netip.Addr, error) {
	if c.cfg.Route != nil {
		return c.cfg.Route(dst)
	}
	for _, d := range c.cfg.Devices {
		for _, g := range d.GIDTable() {
			if a := roce.AddrFromGID(g); a.Is4() == dst.Unmap().Is4() {
				return a, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("no address of dst's IP version to reach %v from: %w", dst, ErrNoRoute)
}

// bind reserves ap for id; port 0 picks a free port above 32767, as the
// kernel's ephemeral ports.
func (c *inprocCM) bind(id *inprocID, ap netip.AddrPort) (netip.AddrPort, error) {
	if c.front.isClosed() {
		return ap, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ap.Port() == 0 {
		for range 1000 {
			try := netip.AddrPortFrom(ap.Addr(), uint16(32768+rand.IntN(28232)))
			if c.free(try) {
				ap = try
				break
			}
		}
	}
	if ap.Port() == 0 || !c.free(ap) {
		return ap, fmt.Errorf("bind %v: %w", ap, ErrAddrInUse)
	}
	c.ports[ap] = id
	return ap, nil
}

// free reports whether no ID is bound to ap's port on ap's address or on
// a wildcard or loopback one (anyAddr, which cma.c's cma_check_port takes
// as every address). Called under mu.
func (c *inprocCM) free(ap netip.AddrPort) bool {
	if _, used := c.ports[ap]; used {
		return false
	}
	for bound := range c.ports {
		if bound.Port() == ap.Port() && (anyAddr(bound.Addr()) || anyAddr(ap.Addr())) {
			return false
		}
	}
	return true
}

func (c *inprocCM) unbind(id *inprocID, ap netip.AddrPort) {
	c.mu.Lock()
	if c.ports[ap] == id {
		delete(c.ports, ap)
	}
	c.mu.Unlock()
}
