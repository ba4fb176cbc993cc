package rdmacm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/roce"
	"github.com/softnic/softnic/verbs"
)

// Port spaces (enum rdma_port_space).
const (
	PortSpaceTCP = mad.PortSpaceTCP
	PortSpaceUDP = mad.PortSpaceUDP // UD QPs, resolved with SIDR (ud.go)
)

// Config says which devices IDs may use and how to find them.
type Config struct {
	// Devices are the devices an ID may bind to: the one whose GID table
	// holds an ID's local address.
	Devices []*verbs.Device
	// Route returns the local address that reaches dst (the routing
	// table's answer; ResolveAddr asks it when it is given no source and
	// dst is no device's own address): an error that wraps ErrNoRoute
	// when there is no route, which ResolveAddr returns at once; a source
	// no device has makes EventAddrError (ErrNotOnDevice). Nil: the first
	// address of the first device of dst's IP version.
	Route func(dst netip.Addr) (netip.Addr, error)
	// Neighbor finds the link address of a peer on dev (ARP or neighbour
	// discovery); ResolveAddr waits for it and reports EventAddrError if
	// it fails. Nil: the devices resolve peers themselves.
	Neighbor func(dev *verbs.Device, peer netip.Addr, timeout time.Duration) error
}

// CM is what librdmacm keeps per process: the devices, and the ports IDs
// are bound to.
type CM struct {
	cfg Config

	mu     sync.Mutex
	ports  map[netip.AddrPort]*ID // bound IDs; an unspecified address binds every device's
	ids    map[*ID]struct{}
	closed bool
	// remote runs the IDs in the daemon of the CM's device when it is
	// reached through one (remote.go); nil otherwise.
	remote *remoteCM
}

// New returns a CM over the devices of cfg.
func New(cfg Config) (*CM, error) {
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("rdmacm: no devices: %w", ErrInvalidArgument)
	}
	c := &CM{cfg: cfg, ports: map[netip.AddrPort]*ID{}, ids: map[*ID]struct{}{}}
	for _, d := range cfg.Devices {
		if d.Remote() {
			if len(cfg.Devices) != 1 {
				return nil, fmt.Errorf("rdmacm: a device served by a daemon is a CM's only device: %w", ErrInvalidArgument)
			}
			c.remote = newRemoteCM(d)
		}
	}
	return c, nil
}

// Close destroys every ID still open. The devices stay open.
func (c *CM) Close() error {
	c.mu.Lock()
	c.closed = true
	ids := make([]*ID, 0, len(c.ids))
	for id := range c.ids {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		id.Destroy()
	}
	return nil
}

// IDs returns how many IDs are open (for leak checks).
func (c *CM) IDs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// device returns the device whose GID table holds a, and a's GID index.
func (c *CM) device(a netip.Addr) (*verbs.Device, int, error) {
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
func (c *CM) route(dst netip.Addr) (netip.Addr, error) {
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
func (c *CM) bind(id *ID, ap netip.AddrPort) (netip.AddrPort, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ap, ErrClosed
	}
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
func (c *CM) free(ap netip.AddrPort) bool {
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

func (c *CM) unbind(id *ID, ap netip.AddrPort) {
	c.mu.Lock()
	if c.ports[ap] == id {
		delete(c.ports, ap)
	}
	c.mu.Unlock()
}
