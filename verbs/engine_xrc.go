package verbs

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/softnic/softnic/ibtransport"
)

// xrcFile names a domain by its file, as the kernel's XRCD inode table.
type xrcFile struct{ dev, ino uint64 }

// xrcDomains are the device's XRC domains: those opened on a file by the
// file, so that every opener shares one, and their receive QPs.
type xrcDomains struct {
	mu     sync.Mutex
	byFile map[xrcFile]*xrcDomain
	next   uint32 // the last domain number given
}

// xrcDomain is one XRC domain, whatever handles are open on it.
type xrcDomain struct {
	num  uint32 // ibtransport.XRCSRQ.Domain
	file *xrcFile
	// keep holds the file open while the domain lives, as the kernel
	// holds its inode: no other file takes its number and the domain.
	keep    *os.File
	handles int                // open XRCDs
	tgts    map[uint32]*xrcTgt // receive QPs by number
}

// xrcTgt is an XRC receive QP and the handles open on it.
type xrcTgt struct {
	t    *ibtransport.QP
	refs int
}

// engineXRCD is a handle of an XRC domain on an in-process device.
type engineXRCD struct {
	e   *engine
	dom *xrcDomain
	// objs counts this handle's SRQs and receive QP handles, which keep
	// it open; closed: Close went through. Both under e.xrc.mu.
	objs   int
	closed bool
}

func (e *engine) OpenXRCD(x *XRCD, f *os.File, oflags int) (XRCDOps, error) {
	var key *xrcFile
	if f != nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			return nil, fmt.Errorf("open XRCD: %w", err)
		}
		key = &xrcFile{dev: uint64(st.Dev), ino: st.Ino}
	}
	t := &e.xrc
	t.mu.Lock()
	defer t.mu.Unlock()
	var dom *xrcDomain
	if key != nil {
		dom = t.byFile[*key]
	}
	switch {
	case dom != nil && oflags&os.O_EXCL != 0:
		return nil, fmt.Errorf("open XRCD: the file has a domain already (O_EXCL): %w", ErrInvalidArgument)
	case dom == nil && key != nil && oflags&os.O_CREATE == 0:
		return nil, fmt.Errorf("open XRCD: the file has no domain and O_CREAT is not set: %w", ErrInvalidArgument)
	case dom == nil:
		t.next++
		dom = &xrcDomain{num: t.next, file: key, tgts: map[uint32]*xrcTgt{}}
		if key != nil {
			fd, err := syscall.Dup(int(f.Fd()))
			if err != nil {
				return nil, fmt.Errorf("open XRCD: %w", err)
			}
			syscall.CloseOnExec(fd)
			dom.keep = os.NewFile(uintptr(fd), "xrcd")
			if t.byFile == nil {
				t.byFile = map[xrcFile]*xrcDomain{}
			}
			t.byFile[*key] = dom
		}
	}
	dom.handles++
	return &engineXRCD{e: e, dom: dom}, nil
}

func (x *engineXRCD) Close() error {
	t := &x.e.xrc
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case x.closed:
		return fmt.Errorf("close XRCD: closed already: %w", ErrInvalidArgument)
	case x.objs > 0:
		return fmt.Errorf("close XRCD: %d SRQs and QPs use it: %w", x.objs, ErrBusy)
	}
	x.closed = true
	x.dom.handles--
	if x.dom.handles == 0 && x.dom.file != nil {
		delete(t.byFile, *x.dom.file)
		x.dom.keep.Close()
	}
	return nil
}

// hold counts an object made through the handle; false once it is closed.
// Called under e.xrc.mu.
func (x *engineXRCD) hold() bool {
	if x.closed {
		return false
	}
	x.objs++
	return true
}

func (x *engineXRCD) CreateRecvQP(q *QP) (QPOps, error) {
	t, err := x.e.group.CreateQP(&ibtransport.QPConfig{Type: QPTypeXRCRecv, XRCDomain: x.dom.num})
	if err != nil {
		return nil, err
	}
	t.Owner = q
	x.e.xrc.mu.Lock()
	defer x.e.xrc.mu.Unlock()
	if !x.hold() {
		_ = t.Destroy()
		return nil, fmt.Errorf("create XRC receive QP: the XRCD is closed: %w", ErrInvalidArgument)
	}
	tgt := &xrcTgt{t: t, refs: 1}
	x.dom.tgts[t.QPN()] = tgt
	return &xrcQP{QP: t, x: x, tgt: tgt}, nil
}

func (x *engineXRCD) OpenQP(q *QP, qpn uint32) (QPOps, error) {
	x.e.xrc.mu.Lock()
	defer x.e.xrc.mu.Unlock()
	tgt := x.dom.tgts[qpn]
	if tgt == nil {
		return nil, fmt.Errorf("open QP %d: no XRC receive QP of the domain: %w", qpn, ErrInvalidArgument)
	}
	if !x.hold() {
		return nil, fmt.Errorf("open QP %d: the XRCD is closed: %w", qpn, ErrInvalidArgument)
	}
	tgt.refs++
	return &xrcQP{QP: tgt.t, x: x, tgt: tgt}, nil
}

// xrcQP is one handle of an XRC receive QP: the transport's QP, which
// the last handle's Destroy destroys.
type xrcQP struct {
	*ibtransport.QP
	x    *engineXRCD
	tgt  *xrcTgt
	gone bool // under x.e.xrc.mu
}

func (h *xrcQP) Destroy() error {
	mu := &h.x.e.xrc.mu
	mu.Lock()
	if h.gone {
		mu.Unlock()
		return fmt.Errorf("destroy QP %d: destroyed already: %w", h.QPN(), ErrInvalidArgument)
	}
	h.gone = true
	h.x.objs--
	h.tgt.refs--
	last := h.tgt.refs == 0
	if last {
		delete(h.x.dom.tgts, h.QPN())
	}
	mu.Unlock()
	if !last {
		return nil
	}
	return h.QP.Destroy()
}

// engineXRCSRQ is an XRC SRQ on an in-process device.
type engineXRCSRQ struct {
	*engineSRQ
	x    *engineXRCD
	reg  *ibtransport.XRCSRQ
	gone bool // under x.e.xrc.mu
}

func (p *enginePD) CreateXRCSRQ(s *SRQ, x *XRCD, cq *CQ, maxWR, maxSGE int) (XRCSRQOps, error) {
	ex, ok := x.ops.(*engineXRCD)
	ec, ok2 := cq.ops.(*engineCQ)
	if !ok || !ok2 || ex.e != p.e {
		return nil, fmt.Errorf("create XRC SRQ: XRCD or CQ of another device: %w", ErrInvalidArgument)
	}
	es := &engineSRQ{s: s, e: p.e}
	es.rq.Init(maxWR, maxSGE)
	xs := &engineXRCSRQ{engineSRQ: es, x: ex,
		reg: &ibtransport.XRCSRQ{Domain: ex.dom.num, SRQ: es, CQ: ec, Memory: p}}
	p.e.xrc.mu.Lock()
	held := ex.hold()
	p.e.xrc.mu.Unlock()
	if !held {
		return nil, fmt.Errorf("create XRC SRQ: the XRCD is closed: %w", ErrInvalidArgument)
	}
	if err := p.e.group.AddXRCSRQ(xs.reg); err != nil {
		p.e.xrc.mu.Lock()
		ex.objs--
		p.e.xrc.mu.Unlock()
		return nil, err
	}
	return xs, nil
}

func (s *engineXRCSRQ) Num() uint32 { return s.reg.Num() }

func (s *engineXRCSRQ) Destroy() error {
	mu := &s.x.e.xrc.mu
	mu.Lock()
	if s.gone {
		mu.Unlock()
		return fmt.Errorf("destroy SRQ %d: destroyed already: %w", s.Num(), ErrInvalidArgument)
	}
	s.gone = true
	s.x.objs--
	mu.Unlock()
	s.e.group.RemoveXRCSRQ(s.reg)
	return nil
}
