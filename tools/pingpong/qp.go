package pingpong

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/tools/perftest"
	"github.com/softnic/softnic/verbs"
)

// pingpong is rc_pingpong.c's struct pingpong_context.
type pingpong struct {
	dev   perftest.Device
	cfg   Config
	buf   []byte
	mr    *verbs.MR
	ch    *verbs.CompChannel // with -e
	cq    *verbs.CQ
	qp    *verbs.QP
	sge   []verbs.SGE // the receives'; the sends' too on RC
	gidx  int
	ud    udPeer   // with Config.UD
	routs int      // receives posted and not yet completed
	gaps  recvGaps // with -t
}

// init is pp_init_ctx and the receives main posts: the buffer, MR, CQ
// (with a completion channel for -e) and QP, moved to INIT.
func (c *pingpong) init() error {
	cfg := c.cfg
	if c.gidx < 0 {
		// ibv_rc_pingpong would send no GID, which RoCE cannot use;
		// softnic picks the first IPv4 GID as perftest does.
		c.gidx = perftest.BestGIDIndex(c.dev.Verbs.GIDTable(), false)
	}
	if cfg.UD {
		if err := c.checkUDSize(); err != nil {
			return err
		}
	}
	pd := c.dev.Verbs.AllocPD()
	c.ud.pd = pd
	// Memory a daemon maps too, when the device is reached through one.
	var err error
	if c.buf, err = c.dev.Verbs.AllocMemory(c.dataOff() + cfg.Size); err != nil {
		return fmt.Errorf("Couldn't allocate work buf: %w", err)
	}
	for i := range c.buf {
		c.buf[i] = fill
	}
	if c.mr, err = pd.RegMR(c.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	if cfg.Events {
		c.ch = c.dev.Verbs.NewCompChannel()
	}
	if cfg.Timestamps {
		mask := c.dev.Verbs.Query().CompletionTimestampMask
		if mask == 0 {
			return errors.New("The device isn't completion timestamp capable")
		}
		c.gaps = newRecvGaps(mask)
	}
	attr := verbs.CQInitAttr{CQE: cfg.RxDepth + 1, Channel: c.ch, Timestamps: cfg.Timestamps}
	if c.cq, err = c.dev.Verbs.CreateCQEx(attr); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	if err := c.createQP(pd); err != nil {
		return err
	}
	c.sge = []verbs.SGE{c.mr.SGE(0, len(c.buf))}
	if c.routs = c.postRecv(cfg.RxDepth); c.routs < cfg.RxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", c.routs)
	}
	if cfg.Events {
		if err := c.cq.RequestNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	return nil
}

// createQP creates the QP (RC, UD with Config.UD, UC with Config.UC) and
// moves it to INIT.
func (c *pingpong) createQP(pd *verbs.PD) error {
	typ, mask, attr := verbs.QPTypeRC, verbs.QPAttrAccessFlags, verbs.QPAttr{State: verbs.QPSInit, Port: 1}
	switch {
	case c.cfg.UD:
		typ, mask, attr.QKey = verbs.QPTypeUD, verbs.QPAttrQKey, udQKey
	case c.cfg.UC:
		typ = verbs.QPTypeUC
	}
	var err error
	if c.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, Type: typ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	if err := c.qp.Modify(&attr, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|mask); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return nil
}

// close destroys the QP and deregisters the buffer.
func (c *pingpong) close() {
	if c.qp != nil {
		c.qp.Destroy()
	}
	if c.ud.ah != nil {
		c.ud.ah.Destroy()
	}
	if c.mr != nil {
		c.mr.Dereg()
	}
	if c.buf != nil {
		c.dev.Verbs.FreeMemory(c.buf)
	}
}

// connect is pp_connect_ctx: RTR with the peer's QPN and PSN (GRH hop
// limit 1, as the tool sets), then RTS with timeout 14 and infinite
// retries.
func (c *pingpong) connect(myPSN uint32, rem oob.PingpongDest) error {
	peer, err := peerAddr(rem.GID)
	if err != nil {
		return err
	}
	if c.dev.Resolve != nil {
		if err := c.dev.Resolve(peer); err != nil {
			return fmt.Errorf("resolve %v: %w", peer, err)
		}
	}
	if c.cfg.UD {
		return c.connectUD(myPSN, rem)
	}
	// uc_pingpong gives RTR and RTS only what a UC QP takes.
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	rtsMask := verbs.QPAttrState | verbs.QPAttrSQPSN
	if !c.cfg.UC {
		rtrMask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		rtsMask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	mtu := oob.MTUEnum(c.cfg.MTU)
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU(mtu), DestQPN: rem.QPN,
		RQPSN: verbs.PSN(rem.PSN), MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AV: verbs.AddressVector{DGID: rem.GID, SGIDIndex: uint8(c.gidx), HopLimit: 1}}, rtrMask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := c.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		SQPSN: verbs.PSN(myPSN), MaxRdAtomic: 1}, rtsMask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// postRecv posts up to n receives and returns how many it posted.
func (c *pingpong) postRecv(n int) int {
	wr := verbs.RecvWR{ID: recvWRID, SGL: c.sge}
	for i := 0; i < n; i++ {
		if c.qp.PostRecv(&wr) != nil {
			return i
		}
	}
	return n
}

// postSend posts the one send. It retries while the send queue is full:
// the engine may publish a send's completion a moment before it frees the
// queue slot.
func (c *pingpong) postSend(ctx context.Context) error {
	wr := verbs.SendWR{ID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: c.sge}
	if c.cfg.UD {
		c.ud.sendWR(&wr)
	}
	for {
		err := c.qp.PostSend(&wr)
		if !errors.Is(err, verbs.ErrQueueFull) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		runtime.Gosched()
	}
}

// completions returns the next completions as rc_pingpong's loop gets
// them: by default it busy-polls the CQ until there is one; with -e it
// sleeps until the CQ's completion event, re-arms the CQ and polls once,
// which may find nothing.
//
// Busy polling is also the shorter round trip: a goroutine asleep on the
// completion channel needs the engine goroutine to wake it through the Go
// scheduler, twice per iteration.
func (c *pingpong) completions(ctx context.Context, wcs []verbs.WC) (int, error) {
	if !c.cfg.Events {
		return c.busyPoll(ctx, wcs)
	}
	cq, err := c.ch.Get(ctx)
	if err != nil {
		return 0, fmt.Errorf("Failed to get cq_event: %w", err)
	}
	if cq != c.cq {
		return 0, fmt.Errorf("CQ event for unknown CQ %p", cq)
	}
	if err := c.cq.RequestNotify(false); err != nil {
		return 0, fmt.Errorf("Couldn't request CQ notification: %w", err)
	}
	n, err := c.cq.Poll(wcs)
	if err != nil {
		return 0, fmt.Errorf("poll CQ failed: %w", err)
	}
	return n, nil
}

// busyPoll polls the CQ until it returns completions or ctx ends, as
// ibv_rc_pingpong busy-polls, yielding the CPU between polls (the engines
// of both ends need it to answer).
func (c *pingpong) busyPoll(ctx context.Context, wcs []verbs.WC) (int, error) {
	n, err := perftest.SpinPoll(ctx, c.cq, wcs, nil)
	if err != nil {
		return 0, fmt.Errorf("poll CQ failed: %w", err)
	}
	return n, nil
}

// firstSend is the client's first send, which starts the ping-pong (with
// -c after marking the pages); it returns the work requests pending.
func (c *pingpong) firstSend(ctx context.Context) (int, error) {
	pending := recvWRID
	if c.cfg.Host == "" {
		return pending, nil
	}
	if c.cfg.Validate {
		markPages(c.buf[c.dataOff():])
	}
	if err := c.postSend(ctx); err != nil {
		return 0, fmt.Errorf("Couldn't post send: %w", err)
	}
	return pending | sendWRID, nil
}

// loop is rc_pingpong's completion loop: each side sends again once both
// its last send and a receive completed, until Iters of each.
func (c *pingpong) loop(ctx context.Context, pending int) error {
	var rcnt, scnt int
	wcs := make([]verbs.WC, 2)
	for rcnt < c.cfg.Iters || scnt < c.cfg.Iters {
		n, err := c.completions(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if err := c.complete(&wc, &rcnt, &scnt); err != nil {
				return err
			}
			pending &^= int(wc.WRID)
			if scnt < c.cfg.Iters && pending == 0 {
				if err := c.postSend(ctx); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	return nil
}

// complete counts one completion, reposting receives when at most one is
// left posted.
func (c *pingpong) complete(wc *verbs.WC, rcnt, scnt *int) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("Failed status %v (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
	}
	switch wc.WRID {
	case sendWRID:
		*scnt++
	case recvWRID:
		if c.routs--; c.routs <= 1 {
			c.routs += c.postRecv(c.cfg.RxDepth - c.routs)
			if c.routs < c.cfg.RxDepth {
				return fmt.Errorf("Couldn't post receive (%d)", c.routs)
			}
		}
		*rcnt++
		if c.cfg.Timestamps {
			c.gaps.add(wc.Timestamp)
		}
	default:
		return fmt.Errorf("Completion for unknown wr_id %d", wc.WRID)
	}
	return nil
}

// peerAddr returns the peer's IP address from its GID, refusing the zero
// interface ID of an ibv_rc_pingpong run without -g.
func peerAddr(gid [16]byte) (netip.Addr, error) {
	var zero [8]byte
	if [8]byte(gid[8:]) == zero {
		return netip.Addr{}, errors.New("the peer sent no GID (interface ID zero); RoCE needs one: give ibv_rc_pingpong -g")
	}
	return netip.AddrFrom16(gid).Unmap(), nil
}
