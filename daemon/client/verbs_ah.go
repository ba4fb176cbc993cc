package client

import (
	"fmt"
	"runtime"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/ibtransport/ibv"
	"github.com/softnic/softnic/verbs"
)

// CreateAH creates an address handle in the daemon. The *AH a program
// holds carries the daemon's handle as its backend (dialedAH), which UD
// posts name.
//
// AH.Destroy does not reach the daemon: the daemon's AH goes when the
// program drops the *AH instead (releaseAH, after a garbage collection),
// or with the session. A program that makes an AH per message, as one
// answering each request from its completion does, thus does not fill
// the daemon with them.
func (p *dialedPD) CreateAH(av *verbs.AddressVector) (*verbs.AH, error) {
	r := p.r
	var h uint32
	err := r.call(func(c *session.Conn) (err error) { h, err = c.CreateAH(p.handle, av); return err })
	if err != nil {
		return nil, fmt.Errorf("create AH: %w", daemonErr(err))
	}
	ah := ibv.NewAH(*av, &dialedAH{r: r, handle: h})
	runtime.AddCleanup(ah, r.releaseAH, h)
	return ah, nil
}

// dialedAH is an AH's backend on a dialed device: the daemon's handle.
type dialedAH struct {
	r      *dialed
	handle uint32
}

// ahHandle returns the daemon's handle of ah, an AH of this device that
// was not destroyed.
func (r *dialed) ahHandle(ah *verbs.AH) (uint32, bool) {
	if ah == nil || ah.Destroyed() {
		return 0, false
	}
	b, ok := ah.Backend().(*dialedAH)
	if !ok || b.r != r {
		return 0, false
	}
	return b.handle, true
}

// releaseAH destroys the daemon's AH of an *AH the program dropped (the
// runtime's cleanup goroutine calls it). A closed device's session took
// its AHs with it.
func (r *dialed) releaseAH(handle uint32) {
	if r.pipes.closing.Load() || r.c.Err() != nil {
		return
	}
	r.call(func(c *session.Conn) error { return c.DestroyAH(handle) })
}
