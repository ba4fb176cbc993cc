package rping

import (
	"bytes"
	"errors"

	"github.com/softnic/softnic/verbs"
)

// errLoop is a loop that stopped on a state it did not wait for; rping
// returns -1 there.
var errLoop = errors.New("rping: unexpected state")

// expect waits for the next state and complains, as rping does, when it
// is not want. It returns errLoop then, or the run's end.
func (s *session) expect(want state, name string) error {
	got, err := s.next()
	if err != nil {
		return err
	}
	if got != want {
		s.log.errorf("wait for %s state %d\n", name, got)
		return errLoop
	}
	return nil
}

// post posts wr, complaining as rping does when the QP refuses it.
func (s *session) post(wr *verbs.SendWR) error {
	if err := s.qp.PostSend(wr); err != nil {
		s.log.errorf("post send error %d\n", errCode(err))
		return err
	}
	return nil
}

// loopResult is what rping's test loops return: success whenever the
// connection ended by a disconnect, whatever stopped the loop.
func (s *session) loopResult(err error) error {
	if s.state == stateDisconnected {
		return nil
	}
	return err
}

// testServer is rping_test_server: per ping, wait for the source's
// advertisement, READ it, send a go-ahead, wait for the sink's, WRITE the
// data there (as a C string with its NUL, as rping does), send a
// go-ahead. It runs until the client disconnects (success) or something
// fails.
func (s *session) testServer() error {
	for {
		if err := s.expect(stateRDMAReadAdv, "RDMA_READ_ADV"); err != nil {
			return s.loopResult(err)
		}
		s.log.debugf("server received sink adv\n")
		if err := s.checkSource(); err != nil {
			return s.loopResult(err)
		}
		s.setRDMA(verbs.WRRDMARead, s.remote.size)
		if err := s.post(&s.rdmaWR); err != nil {
			return s.loopResult(err)
		}
		s.log.debugf("server posted rdma read req \n")
		if err := s.expect(stateRDMAReadComplete, "RDMA_READ_COMPLETE"); err != nil {
			return s.loopResult(err)
		}
		s.log.debugf("server received read complete\n")
		if s.cfg.Verbose {
			s.printData("server ping data: ", s.rdmaBuf)
		}
		if err := s.goAhead(); err != nil {
			return s.loopResult(err)
		}
		if err := s.expect(stateRDMAWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			return s.loopResult(err)
		}
		s.log.debugf("server received sink adv\n")
		s.setRDMA(verbs.WRRDMAWrite, uint32(s.echoLen()))
		if s.log.debug {
			s.log.debugf("rdma write from lkey %x laddr %x len %d\n", s.rdmaSGL[0].LKey, s.rdmaSGL[0].Addr, s.rdmaSGL[0].Length)
		}
		if err := s.post(&s.rdmaWR); err != nil {
			return s.loopResult(err)
		}
		if err := s.expect(stateRDMAWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			return s.loopResult(err)
		}
		s.log.debugf("server rdma write complete \n")
		if err := s.goAhead(); err != nil {
			return s.loopResult(err)
		}
	}
}

// checkSource refuses a source larger than the sink, which the READ could
// not land in. rping posts the READ anyway and its QP fails it with a
// local protection error; refusing first says why.
func (s *session) checkSource() error {
	if int64(s.remote.size) <= int64(len(s.rdmaBuf)) {
		return nil
	}
	s.log.errorf("client's buffer of %d bytes does not fit the rdma buffer of %d (-S)\n", s.remote.size, len(s.rdmaBuf))
	s.state = stateError
	return errLoop
}

// setRDMA aims the RDMA request at the buffer the client advertised last.
func (s *session) setRDMA(op verbs.WROpcode, n uint32) {
	s.rdmaWR.Opcode = op
	s.rdmaWR.RKey = s.remote.rkey
	s.rdmaWR.RemoteAddr = s.remote.addr
	s.rdmaSGL[0].Length = n
}

// echoLen is rping's strlen(rdma_buf) + 1: what the server WRITEs back.
// A buffer without a NUL (the client sent no C string) is written whole.
func (s *session) echoLen() int {
	return min(len(cString(s.rdmaBuf))+1, len(s.rdmaBuf))
}

// goAhead sends the server's go-ahead: its send buffer, which it never
// fills (zeros).
func (s *session) goAhead() error {
	if err := s.post(&s.sendWR); err != nil {
		return err
	}
	s.log.debugf("server posted go ahead\n")
	return nil
}

// testClient is rping_test_client: Count pings (or until stopped), each
// advertising the freshly filled source, then the sink, and checking (-V)
// and printing (-v) what the server wrote to the sink.
func (s *session) testClient() error {
	start := byte(firstLetter)
	for ping := 0; s.cfg.Count == 0 || ping < s.cfg.Count; ping++ {
		s.state = stateRDMAReadAdv
		fillPing(s.startBuf, ping, start)
		start = nextLetter(start)
		s.formatSend(s.startMR)
		if err := s.post(&s.sendWR); err != nil {
			return s.loopResult(err)
		}
		if err := s.expect(stateRDMAWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			return s.loopResult(err)
		}
		s.formatSend(s.rdmaMR)
		if err := s.post(&s.sendWR); err != nil {
			return s.loopResult(err)
		}
		if err := s.expect(stateRDMAWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			return s.loopResult(err)
		}
		if s.cfg.Validate && !bytes.Equal(s.startBuf, s.rdmaBuf) {
			s.log.errorf("data mismatch!\n")
			return s.loopResult(errors.New("rping: data mismatch"))
		}
		if s.cfg.Verbose {
			s.printData("ping data: ", s.rdmaBuf)
		}
	}
	return s.loopResult(nil)
}
