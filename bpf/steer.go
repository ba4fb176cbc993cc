package bpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Errors returned by Attach, matchable with errors.Is.
var (
	ErrNoInterface     = errors.New("no such network interface")
	ErrXDPBusy         = errors.New("another XDP program is already attached to the interface")
	ErrPermission      = errors.New("not permitted: loading and attaching XDP programs needs root (CAP_BPF, CAP_NET_ADMIN)")
	ErrTooManyQueues   = errors.New("queue index beyond the XSKMAP size")
	ErrUnsupportedAddr = errors.New("address is neither IPv4 nor IPv6")
)

// MaxQueues is the number of receive queues the XSKMAP can steer to.
const MaxQueues = 256

// Mode selects how the program is attached.
type Mode int

const (
	ModeAuto    Mode = iota // native if the driver supports it, generic otherwise
	ModeNative              // driver (native) XDP only
	ModeGeneric             // generic (skb) XDP
)

// Stats are the program's counters summed over all CPUs.
type Stats struct {
	Steered      uint64 // redirected into an AF_XDP socket
	PassNotRoCE  uint64 `rdma:"pass_not_roce"` // not IPv4/IPv6 UDP to port 4791: passed to the kernel
	PassNotLocal uint64 // RoCEv2 to an address softnic does not own: passed
	PassNoSocket uint64 // RoCEv2 for softnic but no socket on the queue: passed
	PassFragment uint64 // IP fragments and IPv6 extension headers: passed
	// SteeredFlow are frames a flow rule redirected (SetFlowRules).
	SteeredFlow uint64
}

// Program is the steering program attached to one interface.
type Program struct {
	objs      softnicObjects
	link      link.Link
	ifindex   int
	ifname    string
	mode      Mode
	nativeErr error
	closed    bool
}

// Attach loads the steering program and attaches it to the interface named
// ifname in the calling thread's network namespace. It fails with a clear
// error, leaving the interface untouched, when the interface is missing,
// another XDP program is attached, or privileges are lacking.
func Attach(ifname string, mode Mode) (*Program, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("attach XDP to %q: %w (%v)", ifname, ErrNoInterface, err)
	}
	// Look first, so the error names the program in the way; the kernel's
	// EBUSY below covers the race with someone attaching meanwhile.
	if l, err := netlink.LinkByIndex(ifc.Index); err == nil {
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return nil, fmt.Errorf("attach XDP to %q: %w (program id %d; detach it with `ip link set dev %s xdp off`)",
				ifname, ErrXDPBusy, x.ProgId, ifname)
		}
	}
	p := &Program{ifindex: ifc.Index, ifname: ifname}
	if err := loadSoftnicObjects(&p.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("load XDP program: %w: %v", ErrPermission, err)
		}
		return nil, fmt.Errorf("load XDP program: %w", err)
	}
	var flags link.XDPAttachFlags
	switch mode {
	case ModeNative:
		flags = link.XDPDriverMode
	case ModeGeneric:
		flags = link.XDPGenericMode
	}
	p.mode = mode
	p.link, err = link.AttachXDP(link.XDPOptions{Program: p.objs.SoftnicSteer, Interface: ifc.Index, Flags: flags})
	if err != nil && mode == ModeAuto && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) &&
		!errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
		// The driver has native XDP but refuses this program (queue
		// layout, MTU, missing multi-buffer support): generic XDP still
		// works, only slower.
		var gerr error
		p.link, gerr = link.AttachXDP(link.XDPOptions{Program: p.objs.SoftnicSteer, Interface: ifc.Index, Flags: link.XDPGenericMode})
		if gerr == nil {
			p.mode, p.nativeErr, err = ModeGeneric, err, nil
		} else {
			err = fmt.Errorf("native: %w; generic: %v", err, gerr)
		}
	}
	if err != nil {
		p.objs.Close()
		switch {
		case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST):
			return nil, fmt.Errorf("attach XDP to %q: %w: %v", ifname, ErrXDPBusy, err)
		case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
			return nil, fmt.Errorf("attach XDP to %q: %w: %v", ifname, ErrPermission, err)
		}
		return nil, fmt.Errorf("attach XDP to %q: %w", ifname, err)
	}
	return p, nil
}

// Mode returns how the program was attached: the mode asked for, or
// ModeGeneric when ModeAuto fell back to generic XDP.
func (p *Program) Mode() Mode { return p.mode }

// NativeError returns why native attachment was refused when ModeAuto fell
// back to generic XDP, and nil otherwise.
func (p *Program) NativeError() error { return p.nativeErr }

// Ifindex returns the index of the interface the program is attached to.
func (p *Program) Ifindex() int { return p.ifindex }

// AddAddr makes the program steer RoCEv2 frames addressed to a.
func (p *Program) AddAddr(a netip.Addr) error {
	a = a.Unmap()
	var err error
	switch {
	case a.Is4():
		err = p.objs.LocalV4.Put(a.As4(), uint8(1))
	case a.Is6():
		err = p.objs.LocalV6.Put(softnicIn6Key{Addr: a.As16()}, uint8(1))
	default:
		return fmt.Errorf("steer address %v: %w", a, ErrUnsupportedAddr)
	}
	if err != nil {
		return fmt.Errorf("steer address %v: %w", a, err)
	}
	return nil
}

// RemoveAddr stops steering frames addressed to a.
func (p *Program) RemoveAddr(a netip.Addr) error {
	a = a.Unmap()
	var err error
	switch {
	case a.Is4():
		err = p.objs.LocalV4.Delete(a.As4())
	case a.Is6():
		err = p.objs.LocalV6.Delete(softnicIn6Key{Addr: a.As16()})
	default:
		return fmt.Errorf("unsteer address %v: %w", a, ErrUnsupportedAddr)
	}
	if err != nil {
		return fmt.Errorf("unsteer address %v: %w", a, err)
	}
	return nil
}

// SetSocket steers the frames of receive queue queue into the AF_XDP socket fd.
func (p *Program) SetSocket(queue int, fd int) error {
	if queue < 0 || queue >= MaxQueues {
		return fmt.Errorf("register AF_XDP socket on queue %d: %w", queue, ErrTooManyQueues)
	}
	if err := p.objs.Xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("register AF_XDP socket on queue %d: %w", queue, err)
	}
	return nil
}

// ClearSocket stops steering queue's frames; they go to the kernel again.
func (p *Program) ClearSocket(queue int) error {
	if err := p.objs.Xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregister AF_XDP socket on queue %d: %w", queue, err)
	}
	return nil
}

// Stats reads the counters, summed over CPUs.
func (p *Program) Stats() (Stats, error) {
	var s Stats
	dst := []*uint64{
		softnicCounterCOUNTER_STEERED:        &s.Steered,
		softnicCounterCOUNTER_PASS_NOT_ROCE:  &s.PassNotRoCE,
		softnicCounterCOUNTER_PASS_NOT_LOCAL: &s.PassNotLocal,
		softnicCounterCOUNTER_PASS_NO_SOCKET: &s.PassNoSocket,
		softnicCounterCOUNTER_PASS_FRAGMENT:  &s.PassFragment,
		softnicCounterCOUNTER_STEERED_FLOW:   &s.SteeredFlow,
	}
	var perCPU []uint64
	for c, d := range dst {
		if err := p.objs.Counters.Lookup(softnicCounter(c), &perCPU); err != nil {
			return s, fmt.Errorf("read XDP counter %d: %w", c, err)
		}
		for _, v := range perCPU {
			*d += v
		}
	}
	return s, nil
}

// Close detaches the program and frees its maps. Frames flow to the kernel
// as before Attach. Further calls do nothing.
func (p *Program) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	if p.link != nil {
		if err := p.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach XDP from %q: %w", p.ifname, err))
		}
		p.link = nil
	}
	if err := p.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("free XDP objects: %w", err))
	}
	return errors.Join(errs...)
}
