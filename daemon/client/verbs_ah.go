package client

import (
	"fmt"
	"runtime"
	"weak"

	"github.com/softnic/softnic/verbs"
)

// CreateAH creates an address handle in the daemon. The *AH a program
// holds is the transport's type, whose paths only an engine group makes:
// this process has no engine, so the AH comes from the device's ahGroup,
// a group without engines, which gives it its address vector (AH.AV) and
// nothing to send with. UD posts name the daemon's handle, found by the
// *AH (dialedObjects.ahs).
//
// AH.Destroy, the transport's method, does not reach verbs: the daemon's
// AH goes when the program drops the *AH instead (releaseAH, after a
// garbage collection), or with the session. A program that makes an AH
// per message, as one answering each request from its completion does,
// thus does not fill the daemon with them.
func (p *dialedPD) CreateAH(av *verbs.AddressVector) (*verbs.AH, error) {
	r := p.r
	var h uint32
	err := r.call(func(c *Conn) (err error) { h, err = c.CreateAH(p.handle, av); return err })
	if err != nil {
		return nil, fmt.Errorf("create AH: %w", daemonErr(err))
	}
	ah, err := r.ahGroup.CreateAH(av)
	if err != nil {
		r.call(func(c *Conn) error { return c.DestroyAH(h) })
		return nil, err
	}
	key := weak.Make(ah)
	r.objects.ahs.Store(key, h)
	runtime.AddCleanup(ah, r.releaseAH, dialedAHRef{key: key, handle: h})
	return ah, nil
}

// dialedAHRef names a dialed device's AH without keeping it alive.
type dialedAHRef struct {
	key    weak.Pointer[verbs.AH]
	handle uint32
}

// ahHandle returns the daemon's handle of ah.
func (o *dialedObjects) ahHandle(ah *verbs.AH) (uint32, bool) {
	h, ok := o.ahs.Load(weak.Make(ah))
	if !ok {
		return 0, false
	}
	return h.(uint32), true
}

// releaseAH destroys the daemon's AH of an *AH the program dropped (the
// runtime's cleanup goroutine calls it). A closed device's session took
// its AHs with it.
func (r *dialed) releaseAH(ref dialedAHRef) {
	r.objects.ahs.Delete(ref.key)
	if r.pipes.closing.Load() || r.c.Err() != nil {
		return
	}
	r.call(func(c *Conn) error { return c.DestroyAH(ref.handle) })
}
