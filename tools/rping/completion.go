package rping

import (
	"errors"

	"github.com/softnic/softnic/verbs"
)

// next handles completions, in order, until one moves the state (a
// receive, an RDMA completion, an error), as rping's CQ thread does before
// it posts the semaphore the loops wait on, and returns the new state.
// When the CQ is empty it sleeps until a completion comes or the
// connection's lifetime ends: a disconnect by the CM is the state
// DISCONNECTED, as rping's DISCONNECTED event; the end of the run is an
// error.
func (s *session) next() (state, error) {
	for {
		if s.iwc == s.nwc {
			n, err := s.cq.Wait(s.life.ctx, s.wcs[:])
			switch {
			case err == nil:
				s.nwc, s.iwc = n, 0
				continue
			case s.life.disconnected.Load():
				s.state = stateDisconnected
				return s.state, nil
			case errors.Is(err, verbs.ErrCQOverflow):
				s.log.errorf("poll error %d\n", errCode(err))
				s.state = stateError
				return s.state, nil
			default:
				return s.state, err
			}
		}
		wc := &s.wcs[s.iwc]
		s.iwc++
		if s.complete(wc) {
			return s.state, nil
		}
	}
}

// complete handles one completion as rping_cq_event_handler does and
// reports whether it moved the state. Flushed work requests (the QP went
// to error on a disconnect) are ignored, as rping ignores them; a send
// completion changes nothing.
func (s *session) complete(wc *verbs.WC) bool {
	if wc.Status == verbs.WCWRFlushErr {
		return false
	}
	if wc.Status != verbs.WCSuccess {
		s.log.errorf("cq completion failed status %d\n", wc.Status)
		s.state = stateError
		return true
	}
	switch wc.Opcode {
	case verbs.WCSend:
		s.log.debugf("send completion\n")
		return false
	case verbs.WCRDMAWrite:
		s.log.debugf("rdma write completion\n")
		s.state = stateRDMAWriteComplete
	case verbs.WCRDMARead:
		s.log.debugf("rdma read completion\n")
		s.state = stateRDMAReadComplete
	case verbs.WCRecv:
		s.log.debugf("recv completion\n")
		s.received(wc)
	default:
		s.log.debugf("unknown!!!!! completion\n")
		s.state = stateError
	}
	return true
}

// received handles a receive (server_recv or client_recv), then posts the
// receive again before anything else can make the peer send.
func (s *session) received(wc *verbs.WC) {
	if wc.ByteLen != infoLen {
		s.log.errorf("Received bogus data, size %d\n", wc.ByteLen)
		s.log.errorf("recv wc error: %d\n", -1)
		s.state = stateError
		return
	}
	if s.cfg.Server {
		s.remote = parseInfo(s.recvBuf)
		if s.log.debug {
			s.log.debugf("Received rkey %x addr %x len %d from peer\n", s.remote.rkey, s.remote.addr, s.remote.size)
		}
		// The first advertisement of a ping names the source, the
		// second the sink.
		if s.state <= stateConnected || s.state == stateRDMAWriteComplete {
			s.state = stateRDMAReadAdv
		} else {
			s.state = stateRDMAWriteAdv
		}
	} else if s.state == stateRDMAReadAdv {
		s.state = stateRDMAWriteAdv
	} else {
		s.state = stateRDMAWriteComplete
	}
	if err := s.postRecv(); err != nil {
		s.log.errorf("post recv error %d\n", errCode(err))
		s.state = stateError
	}
}
