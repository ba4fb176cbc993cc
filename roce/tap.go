package roce

import (
	"errors"
	"fmt"
)

// A Tap sees every frame a lane sends, as it goes to the link (after the
// ICRC), and every frame it receives, as it comes from the link (before it
// is parsed), on the lane's goroutine: it must neither block nor keep the
// frame. Packets between two QPs of the device never reach the link and
// pass no tap, as a NIC's loopback is not seen by tcpdump. Package
// roce/capture's packet capture is one.
type Tap interface {
	Frame(frame []byte)
}

// ErrTapsSet is returned by SetTaps while other taps are set.
var ErrTapsSet = errors.New("roce: the device's lanes have taps already")

// tapHolder carries a lane's Tap through an atomic pointer.
type tapHolder struct{ t Tap }

// Lanes returns how many lanes the device has: SetTaps takes one Tap each.
func (d *Device) Lanes() int { return len(d.lanes) }

// SetTaps gives lane i taps[i] (a nil entry: none), or, with nil, takes
// every lane's tap away. A lane may still be in its last tap's Frame when
// SetTaps(nil) returns; the tap must take care of that itself.
func (d *Device) SetTaps(taps []Tap) error {
	d.tapMu.Lock()
	defer d.tapMu.Unlock()
	if taps == nil {
		for _, ln := range d.lanes {
			ln.tap.Store(nil)
		}
		d.tapped = false
		return nil
	}
	if len(taps) != len(d.lanes) {
		return fmt.Errorf("roce: %d taps for %d lanes", len(taps), len(d.lanes))
	}
	if d.tapped {
		return ErrTapsSet
	}
	for i, ln := range d.lanes {
		if taps[i] != nil {
			ln.tap.Store(&tapHolder{taps[i]})
		}
	}
	d.tapped = true
	return nil
}

// tapFrame shows frame to the lane's tap, if it has one.
func (ln *lane) tapFrame(frame []byte) {
	if h := ln.tap.Load(); h != nil {
		h.t.Frame(frame)
	}
}
