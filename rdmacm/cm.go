package rdmacm

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/softnic/softnic/ibtransport/mad"
	"github.com/softnic/softnic/verbs"
)

// Port spaces (enum rdma_port_space).
const (
	PortSpaceTCP = mad.PortSpaceTCP
	PortSpaceUDP = mad.PortSpaceUDP // UD QPs, resolved with SIDR (conn.go)
	// PortSpaceIB connects RC QPs and XRC's send and receive QPs as the
	// TCP port space does RC's (rdma_xserver -c x), with its own ports.
	PortSpaceIB = mad.PortSpaceIB
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

// CM is what librdmacm keeps per process: the devices, and the IDs open
// on them.
type CM struct {
	be CMBackend // in process, or its device's provider's (backend.go)

	mu     sync.Mutex
	ids    map[*ID]struct{}
	closed bool
}

// New returns a CM over the devices of cfg. Its IDs run in this process,
// on the devices' IB CM, unless its device's verbs backend runs them
// (a BackendProvider: a device a softnic daemon serves).
func New(cfg Config) (*CM, error) {
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("rdmacm: no devices: %w", ErrInvalidArgument)
	}
	for _, d := range cfg.Devices {
		if d.Remote() && len(cfg.Devices) != 1 {
			return nil, fmt.Errorf("rdmacm: a device served by a daemon is a CM's only device: %w", ErrInvalidArgument)
		}
	}
	c := &CM{ids: map[*ID]struct{}{}}
	d := cfg.Devices[0]
	p, provides := d.Backend().(BackendProvider)
	switch {
	case provides:
		c.be = p.NewCMBackend(cfg, c.hooks())
	case d.Remote():
		return nil, fmt.Errorf("rdmacm: the device's backend runs no connection manager: %w", ErrNotSupported)
	default:
		c.be = newInprocCM(c, cfg)
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

// newID makes an ID of c in port space ps, its half the one half makes
// for it; add registers it.
func (c *CM) newID(ps mad.PortSpace, half func(*ID) IDBackend) *ID {
	id := &ID{c: c, ps: ps}
	id.be = half(id)
	return id
}

// add registers id as one of c's open IDs, unless c is closed: false
// then.
func (c *CM) add(id *ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.ids[id] = struct{}{}
	return true
}

// remove forgets a destroyed ID.
func (c *CM) remove(id *ID) {
	c.mu.Lock()
	delete(c.ids, id)
	c.mu.Unlock()
}

// isClosed reports whether Close was called.
func (c *CM) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
