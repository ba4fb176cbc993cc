package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/ibtransport"
)

// DeviceConfig describes a RoCE device.
type DeviceConfig struct {
	// Addrs are the device's IP addresses; as GIDs they form its GID table,
	// index i being Addrs[i].
	Addrs []netip.Addr
	// RxBatch is how many frames the engine takes from the link at a time
	// (default 64).
	RxBatch int
	// Resolve finds the MAC address of a peer when a QP is connected to it
	// and SetNeighbor has no entry (for example roce.ResolveNeighbor over the
	// kernel's neighbour table). Without it such peers get the broadcast
	// address.
	Resolve func(netip.Addr) ([6]byte, error)
	// Spin is how long the engine goroutine keeps polling the link after
	// its last work before it blocks (default 50µs; negative: never). A
	// reply that comes within it needs no wake-up of a sleeping thread,
	// and posts need no doorbell system call.
	Spin time.Duration
}

// DeviceCounters count what the device did with frames, beyond the parse
// outcomes in Rx.
type DeviceCounters struct {
	Rx         RxCounters
	RxNotForUs atomic.Uint64 // RoCEv2 frames to an address not in the GID table
	TxFrames   atomic.Uint64
	TxNoBuffer atomic.Uint64 // times the link had no TX buffer free
	TxErrors   atomic.Uint64 // frames that could not be finished
	Loopback   atomic.Uint64 // packets between two QPs of this device
}

// Device is a RoCEv2 adapter made of a Link and an ibtransport engine. One
// goroutine, started by NewDevice, runs the engine: it receives frames,
// checks and strips their encapsulation, hands the IB packets to the
// engine, and sends what the engine builds.
type Device struct {
	link    Link
	eng     *ibtransport.Engine
	addrs   []netip.Addr
	gids    []ibtransport.GID
	mac     [6]byte
	batch   int
	spin    time.Duration
	resolve func(netip.Addr) ([6]byte, error)
	Ctr     DeviceCounters
	neighMu sync.Mutex
	neigh   map[netip.Addr][6]byte

	// Engine goroutine state.
	rxFrame Frame
	rxInfo  ibtransport.RecvInfo
	onFrame func([]byte)
	txBuf   []byte
	// Loopback: packets to one of the device's own GIDs never reach the
	// link; they wait in loopQ, in buffers of the device's own, until the
	// engine loop hands them back to the engine.
	loopFree [][]byte
	loopBuf  []byte
	loopQ    []loopPacket

	stop    atomic.Bool
	done    chan struct{}
	closeMu sync.Mutex
}

// NewDevice creates a device on link and starts its engine goroutine.
func NewDevice(link Link, cfg DeviceConfig) (*Device, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("new RoCE device: no addresses: %w", ibtransport.ErrInvalidArgument)
	}
	d := &Device{link: link, mac: link.HardwareAddr(), batch: cfg.RxBatch, resolve: cfg.Resolve, neigh: map[netip.Addr][6]byte{},
		done: make(chan struct{})}
	if d.batch <= 0 {
		d.batch = 64
	}
	d.spin = cfg.Spin
	if d.spin == 0 {
		d.spin = defaultSpin
	}
	for _, a := range cfg.Addrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("new RoCE device: invalid address: %w", ibtransport.ErrInvalidArgument)
		}
		d.addrs = append(d.addrs, a.Unmap())
		d.gids = append(d.gids, GIDFromAddr(a))
	}
	d.eng = ibtransport.NewEngine(d, link.Wake)
	d.onFrame = d.receive
	go d.run()
	return d, nil
}

// Engine returns the transport engine.
func (d *Device) Engine() *ibtransport.Engine { return d.eng }

// Link returns the device's link.
func (d *Device) Link() Link { return d.link }

// GID returns entry i of the GID table.
func (d *Device) GID(i int) (ibtransport.GID, error) {
	if i < 0 || i >= len(d.gids) {
		return ibtransport.GID{}, fmt.Errorf("GID index %d of %d: %w", i, len(d.gids), ibtransport.ErrInvalidArgument)
	}
	return d.gids[i], nil
}

// SetNeighbor records the MAC address of a peer IP address. Paths to
// addresses without an entry ask DeviceConfig.Resolve, or else use the
// broadcast address.
func (d *Device) SetNeighbor(a netip.Addr, mac [6]byte) {
	d.neighMu.Lock()
	d.neigh[a.Unmap()] = mac
	d.neighMu.Unlock()
}

// Close stops the engine goroutine. The link stays open; its owner closes
// it.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.stop.Swap(true) {
		return nil
	}
	d.link.Wake()
	<-d.done
	return nil
}

// defaultSpin is DeviceConfig.Spin's default: a few round trips over
// AF_XDP in copy mode.
const defaultSpin = 50 * time.Microsecond

func (d *Device) run() {
	defer close(d.done)
	defer d.eng.Stop()
	var lastWork time.Time
	for !d.stop.Load() {
		sent := d.eng.Ctr.TxPackets.Load()
		n := d.link.Receive(d.onFrame, d.batch)
		busy, wait := d.eng.Process()
		if err := d.link.Flush(); errors.Is(err, ErrLinkClosed) {
			return
		}
		looped := d.deliverLoopback()
		if n > 0 || busy || looped || d.eng.Ctr.TxPackets.Load() != sent {
			lastWork = time.Now()
			continue
		}
		if d.spin > 0 && time.Since(lastWork) < d.spin {
			// Poll again soon, but let other threads (a poller of this
			// process or of the peer) have the CPU meanwhile. Gosched
			// first runs the goroutines this one readied (a CQ.Wait or
			// completion channel reader): the runtime queues them on
			// this goroutine's P, and while it spins here another thread
			// took them only about 75µs later (go tool trace).
			runtime.Gosched()
			osYield()
			continue
		}
		if d.eng.PrepareSleep() {
			err := d.link.Wait(wait)
			d.eng.Awake()
			if errors.Is(err, ErrLinkClosed) {
				return
			}
		}
	}
}

// osYield gives the CPU to another runnable thread, if any (sched_yield).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// receive handles one frame from the link.
func (d *Device) receive(frame []byte) {
	f := &d.rxFrame
	err := ParseFrame(frame, f)
	d.Ctr.Rx.Count(err)
	if err != nil {
		return
	}
	dst := GIDFromAddr(f.Dst)
	idx := -1
	for i := range d.gids {
		if d.gids[i] == dst {
			idx = i
			break
		}
	}
	if idx < 0 {
		d.Ctr.RxNotForUs.Add(1)
		return
	}
	d.rxInfo.SGID = GIDFromAddr(f.Src)
	d.rxInfo.DGID = dst
	d.rxInfo.DGIDIndex = idx
	d.eng.Receive(f.IB, &d.rxInfo)
}

type loopPacket struct {
	buf  []byte
	n    int
	info ibtransport.RecvInfo
}

// loopBuffers is the number of loopback packets that may wait at once.
const loopBuffers = 256

// deliverLoopback hands the packets QPs sent to QPs of the same device to
// the engine. It reports whether there were any.
func (d *Device) deliverLoopback() bool {
	if len(d.loopQ) == 0 {
		return false
	}
	// Receive queues responses for the next Process but sends nothing, so
	// the queue does not grow while it is walked.
	for i := range d.loopQ {
		lp := &d.loopQ[i]
		d.eng.Receive(lp.buf[:lp.n], &lp.info)
		d.loopFree = append(d.loopFree, lp.buf)
		lp.buf = nil
	}
	d.loopQ = d.loopQ[:0]
	return true
}

// largest header before a payload: BTH + RETH + ImmDt (WRITE ONLY with
// immediate).
const maxPayloadHeaders = ibtransport.BTHLen + ibtransport.RETHLen + ibtransport.ImmDtLen

// Path implements ibtransport.Port.
func (d *Device) Path(av *ibtransport.AddressVector, qpn uint32, pathMTU int) (ibtransport.TxPath, error) {
	if int(av.SGIDIndex) >= len(d.addrs) {
		return nil, fmt.Errorf("source GID index %d of %d: %w", av.SGIDIndex, len(d.addrs), ibtransport.ErrInvalidArgument)
	}
	src := d.addrs[av.SGIDIndex]
	dst := AddrFromGID(av.DGID)
	if src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("GIDs %v and %v: %w", src, dst, ErrAddressFamily)
	}
	for i, a := range d.addrs {
		if a == dst {
			if d.loopFree == nil && d.loopQ == nil {
				size := maxPayloadHeaders + ibtransport.MTU4096.Bytes() + 8
				backing := make([]byte, loopBuffers*size)
				for j := range loopBuffers {
					d.loopFree = append(d.loopFree, backing[j*size:(j+1)*size:(j+1)*size])
				}
				d.loopQ = make([]loopPacket, 0, loopBuffers)
			}
			return &loopPath{d: d, info: ibtransport.RecvInfo{SGID: d.gids[av.SGIDIndex], DGID: d.gids[i], DGIDIndex: i}}, nil
		}
	}
	p := &path{d: d, encap: Encap{SrcMAC: d.mac, DstMAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		Src: src, Dst: dst, TrafficClass: av.TrafficClass, HopLimit: av.HopLimit, FlowLabel: av.FlowLabel,
		SrcPort: SourcePort(qpn)}}
	if p.encap.HopLimit == 0 {
		p.encap.HopLimit = 64
	}
	d.neighMu.Lock()
	mac, ok := d.neigh[dst]
	d.neighMu.Unlock()
	switch {
	case ok:
		p.encap.DstMAC = mac
	case d.resolve != nil:
		// Runs on the engine goroutine, during ModifyQP to RTR: resolution
		// is not on the packet path.
		mac, err := d.resolve(dst)
		if err != nil {
			return nil, fmt.Errorf("resolve %v: %w", dst, err)
		}
		p.encap.DstMAC = mac
		d.SetNeighbor(dst, mac)
	}
	p.hl = p.encap.HeaderLen()
	ipLen := p.hl - ethHeaderLen
	p.maxIB = d.link.MTU() - ipLen - ibtransport.ICRCLen
	if maxPayloadHeaders+pathMTU > p.maxIB {
		return nil, fmt.Errorf("path MTU %d does not fit the link MTU %d: %w", pathMTU, d.link.MTU(), ibtransport.ErrInvalidArgument)
	}
	return p, nil
}

// path sends one QP's packets: it caches the QP's encapsulation.
type path struct {
	d     *Device
	encap Encap
	hl    int
	maxIB int
}

// Buffer implements ibtransport.TxPath: room after the headers in a TX frame.
func (p *path) Buffer() []byte {
	d := p.d
	if d.txBuf == nil {
		if d.txBuf = d.link.TxFrame(); d.txBuf == nil {
			d.Ctr.TxNoBuffer.Add(1)
			return nil
		}
	}
	return d.txBuf[p.hl : p.hl+p.maxIB]
}

// Send implements ibtransport.TxPath.
func (p *path) Send(n int) {
	d := p.d
	l, err := p.encap.Finish(d.txBuf, n)
	if err != nil {
		d.Ctr.TxErrors.Add(1)
		return // the buffer stays for the next packet
	}
	d.link.Send(d.txBuf[:l])
	d.txBuf = nil
	d.Ctr.TxFrames.Add(1)
}

// loopPath sends one QP's packets to another QP of the same device, the way
// a NIC loops back traffic to its own GIDs.
type loopPath struct {
	d    *Device
	info ibtransport.RecvInfo
}

// Buffer implements ibtransport.TxPath.
func (p *loopPath) Buffer() []byte {
	d := p.d
	if d.loopBuf == nil {
		if len(d.loopFree) == 0 {
			return nil // freed when the engine loop delivers the queue
		}
		d.loopBuf = d.loopFree[len(d.loopFree)-1]
		d.loopFree = d.loopFree[:len(d.loopFree)-1]
	}
	return d.loopBuf
}

// Send implements ibtransport.TxPath.
func (p *loopPath) Send(n int) {
	d := p.d
	d.loopQ = append(d.loopQ, loopPacket{buf: d.loopBuf, n: n, info: p.info})
	d.loopBuf = nil
	d.Ctr.Loopback.Add(1)
}
