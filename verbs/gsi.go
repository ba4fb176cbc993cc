package verbs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/ibtransport"
	"github.com/softnic/softnic/ibtransport/mad"
)

// gsi is a device's QP1, the general services QP: a UD QP that every
// device has, as every InfiniBand port has, so that a peer's connection
// manager always finds someone to answer it. It receives management
// datagrams (MADs) and hands those of the CM class to the device's
// connection manager; it sends the MADs the connection manager gives it.
//
// One goroutine waits on the receive CQ. Sends are posted by whoever calls
// send, under mu, which also reclaims finished send slots from the send
// CQ: no goroutine has to run for a send slot to come free.
type gsi struct {
	dev    *Device
	pd     *PD
	qp     *QP
	mr     *MR
	rcq    *CQ
	scq    *CQ
	handle func(from AddressVector, b []byte) // CM-class MADs
	ctr    GSICounters
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	freeSend []int // send slots
	sendWCs  [gsiSendSlots]WC
}

// QP1's number and the Q_Key every MAD to it carries.
const (
	GSIQPN  = mad.GSIQPN
	GSIQKey = mad.GSIQKey
)

const (
	gsiRecvSlots = 64
	gsiSendSlots = 32
	gsiRecvLen   = GRHLen + mad.Len
	// gsiSendWait bounds how long send waits for a send slot: the engine
	// frees them as fast as it puts packets on the link, so a send that
	// finds none for this long is dropped, as a full link would drop it;
	// the CM retries.
	gsiSendWait = 100 * time.Millisecond
)

// GSICounters count what QP1 did; the connection manager counts what the
// MADs meant.
type GSICounters struct {
	RxMADs      atomic.Uint64 `rdma:"rx_mads"` // MADs received and handed on
	RxBadMAD    atomic.Uint64 // too short, wrong base version, or a receive error
	RxNoClass   atomic.Uint64 // a management class nobody here serves
	TxMADs      atomic.Uint64 `rdma:"tx_mads"`
	TxNoSlot    atomic.Uint64 // dropped: no send slot came free in time
	TxBadTarget atomic.Uint64 // no path to the destination
}

// openGSI creates and connects the device's QP1; start starts it.
func openGSI(e *engine) (*gsi, error) {
	d := e.d
	s := &gsi{dev: d, pd: d.AllocPD(), done: make(chan struct{})}
	buf := make([]byte, gsiRecvSlots*gsiRecvLen+gsiSendSlots*mad.Len)
	var err error
	if s.mr, err = s.pd.RegMR(buf, AccessLocalWrite); err != nil {
		return nil, err
	}
	if s.rcq, err = d.CreateCQ(gsiRecvSlots, nil); err != nil {
		return nil, err
	}
	if s.scq, err = d.CreateCQ(gsiSendSlots, nil); err != nil {
		return nil, err
	}
	cfg := ibtransport.QPConfig{Memory: s.pd.ops.(*enginePD), SendCQ: s.scq.ops.(*engineCQ), RecvCQ: s.rcq.ops.(*engineCQ),
		Cap:    QPCap{MaxSendWR: gsiSendSlots, MaxRecvWR: gsiRecvSlots, MaxSendSGE: 1, MaxRecvSGE: 1},
		SigAll: true, Type: QPTypeUD, GSI: true}
	t, err := e.group.CreateQP(&cfg)
	if err != nil {
		return nil, err
	}
	s.qp = &QP{ops: t}
	t.Owner = s.qp
	if err := s.connect(); err != nil {
		s.qp.Destroy()
		return nil, err
	}
	for i := range gsiSendSlots {
		s.freeSend = append(s.freeSend, i)
	}
	return s, nil
}

// start starts handing the MADs QP1 receives to handle.
func (s *gsi) start(handle func(from AddressVector, b []byte)) {
	s.handle = handle
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.receiveLoop(ctx)
}

// connect brings QP1 to RTS with its well-known Q_Key and posts every
// receive slot.
func (s *gsi) connect() error {
	steps := []struct {
		attr QPAttr
		mask QPAttrMask
	}{
		{QPAttr{State: QPSInit, QKey: GSIQKey, Port: 1}, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey},
		{QPAttr{State: QPSRTR}, QPAttrState},
		{QPAttr{State: QPSRTS}, QPAttrState | QPAttrSQPSN},
	}
	for _, st := range steps {
		if err := s.qp.Modify(&st.attr, st.mask); err != nil {
			return fmt.Errorf("GSI QP to %v: %w", st.attr.State, err)
		}
	}
	for i := range gsiRecvSlots {
		if err := s.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

func (s *gsi) postRecv(slot int) error {
	sge := s.mr.SGE(slot*gsiRecvLen, gsiRecvLen)
	return s.qp.PostRecv(&RecvWR{ID: uint64(slot), SGL: []SGE{sge}})
}

// receiveLoop hands each MAD QP1 receives to its handler and posts the
// receive again, until close.
func (s *gsi) receiveLoop(ctx context.Context) {
	defer close(s.done)
	wcs := make([]WC, 16)
	for {
		n, err := s.rcq.Wait(ctx, wcs)
		if err != nil {
			return
		}
		for i := range wcs[:n] {
			s.deliver(&wcs[i])
			if err := s.postRecv(int(wcs[i].WRID)); err != nil {
				return // QP1 went to ERR: the device is closing
			}
		}
	}
}

// deliver checks one receive and hands its MAD on.
func (s *gsi) deliver(wc *WC) {
	slot := s.mr.Bytes()[int(wc.WRID)*gsiRecvLen:][:gsiRecvLen]
	if wc.Status != WCSuccess || wc.ByteLen < gsiRecvLen {
		s.ctr.RxBadMAD.Add(1)
		return
	}
	from, err := s.dev.InitAHFromWC(wc, slot[:GRHLen])
	if err != nil {
		s.ctr.RxBadMAD.Add(1)
		return
	}
	b := slot[GRHLen:]
	h := mad.Header(b[:mad.HeaderLen])
	switch {
	case h.BaseVersion() != mad.BaseVersion:
		s.ctr.RxBadMAD.Add(1)
	case h.MgmtClass() != mad.ClassCM:
		s.ctr.RxNoClass.Add(1)
	default:
		s.ctr.RxMADs.Add(1)
		s.handle(from, b)
	}
}

// errNoSendSlot is send's error when QP1's send queue stays full.
var errNoSendSlot = errors.New("GSI: no send slot came free")

// send sends one MAD to QP1 at to.
func (s *gsi) send(to AddressVector, m []byte) error {
	if len(m) != mad.Len {
		return fmt.Errorf("GSI send of %d bytes: %w", len(m), ErrInvalidArgument)
	}
	ah, err := s.pd.CreateAH(&to)
	if err != nil {
		s.ctr.TxBadTarget.Add(1)
		return err
	}
	defer ah.Destroy()
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := s.takeSendSlot()
	if !ok {
		s.ctr.TxNoSlot.Add(1)
		return errNoSendSlot
	}
	off := gsiRecvSlots*gsiRecvLen + slot*mad.Len
	copy(s.mr.Bytes()[off:], m)
	wr := SendWR{ID: uint64(slot), Opcode: WRSend, SGL: []SGE{s.mr.SGE(off, mad.Len)},
		AH: ah, RemoteQPN: GSIQPN, RemoteQKey: GSIQKey}
	if err := s.qp.PostSend(&wr); err != nil {
		s.freeSend = append(s.freeSend, slot)
		return err
	}
	s.ctr.TxMADs.Add(1)
	return nil
}

// takeSendSlot returns a free send slot, reclaiming the slots of finished
// sends, waiting up to gsiSendWait for one. Called under mu.
func (s *gsi) takeSendSlot() (int, bool) {
	deadline := time.Now().Add(gsiSendWait)
	for {
		n, _ := s.scq.Poll(s.sendWCs[:])
		for _, wc := range s.sendWCs[:n] {
			s.freeSend = append(s.freeSend, int(wc.WRID))
		}
		if k := len(s.freeSend); k > 0 {
			slot := s.freeSend[k-1]
			s.freeSend = s.freeSend[:k-1]
			return slot, true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		time.Sleep(time.Millisecond)
	}
}

// close stops the receive loop and destroys QP1.
func (s *gsi) close() {
	s.cancel()
	<-s.done
	s.qp.Destroy()
}
