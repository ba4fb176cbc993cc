package oob

import (
	"errors"
	"fmt"
	"strings"
)

// Test is one of the perftest programs softnic speaks to.
type Test int

const (
	WriteBW Test = iota
	ReadBW
	SendBW
	AtomicBW
	WriteLat
	ReadLat
	SendLat
)

var testNames = [...]string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat"}

func (t Test) String() string {
	if t < 0 || int(t) >= len(testNames) {
		return fmt.Sprintf("Test(%d)", int(t))
	}
	return testNames[t]
}

// ParseTest maps a program name ("write_bw", "ib_write_bw") to its Test.
func ParseTest(name string) (Test, error) {
	for i, n := range testNames {
		if name == n || name == "ib_"+n {
			return Test(i), nil
		}
	}
	return 0, fmt.Errorf("unknown test %q: the tests are %s", name, strings.Join(testNames[:], ", "))
}

// IsBW reports whether t is a bandwidth test.
func (t Test) IsBW() bool { return t <= AtomicBW }

// Hooks are where the sequence hands control back to the test runner, at
// the points where perftest touches its QPs.
type Hooks struct {
	// Connect moves the QPs to RTR and RTS (ctx_connect); remote has one
	// entry per QP, in order. Required.
	Connect func(remote []PerftestDest) error
	// Connected runs once the handshakes after ctx_connect are done: where
	// perftest prints the local and remote addresses and the table header.
	Connected func(remote []PerftestDest) error
	// Prepare runs before the synchronising handshake of each round of a
	// SEND test (the server posts its receives there). Optional.
	Prepare func(round int) error
	// Measure runs round round of the test on this side. A bandwidth
	// client returns its report, sent to the server after the last round.
	// Not called on the servers of write/read/atomic bw (unless
	// bidirectional) and read_lat, which only wait.
	Measure func(round int) (BWReport, error)
	// ServerReport receives the client's figures on the server of a
	// write/read/atomic bandwidth test. Optional.
	ServerReport func(BWReport) error
	// DuplexReport receives both sides' figures after each round of a
	// bidirectional test (perftest's -b), this side's first. Optional.
	DuplexReport func(mine, theirs BWReport) error
}

// ErrNoConnect is returned by Run when Hooks.Connect is missing.
var ErrNoConnect = errors.New("oob: Hooks.Connect is required")

// Run drives the out-of-band sequence of test after Setup, the way the
// main() of write_bw.c, read_bw.c, send_bw.c, atomic_bw.c, write_lat.c,
// read_lat.c and send_lat.c of perftest 4.5-0.17 do for non-duplex,
// iteration-count runs. local has one entry per QP. rounds is the number
// of message sizes: 1, or 23 for -a (sizes 2 to 2^23); perftest's send_bw
// adds a handshake after each round only in that mode.
//
// Per test, with K one keys exchange (client writes first):
//
//	write_lat, read_lat: K before the per-QP loop.
//	all:                 K per QP, Connect.
//	send_bw, send_lat:   K after Connect.
//	all:                 K per QP (perftest prints the remote keys here).
//	others:              K, "an additional handshake after moving qp to RTR".
//	then Connected, and:
//	write/read/atomic_bw server: K (waits for the client's run), report, close.
//	write/read/atomic_bw client: rounds, K, report, close.
//	send_bw:  per round Prepare, K, Measure (and K if rounds > 1); close.
//	write_lat: rounds; no closing handshake.
//	read_lat: server closes at once; client runs its rounds, then closes.
//	send_lat: per round Prepare, K, Measure; close.
//
// close is ctx_close_connection: K and "done".
func (p *Session) Run(test Test, local []PerftestDest, rounds int, h Hooks) ([]PerftestDest, error) {
	return p.run(test, local, rounds, false, h)
}

// RunDuplex is Run for the bidirectional mode (-b) of the bandwidth tests,
// where both sides measure: after the handshakes that follow ctx_connect,
// each round of write/read/atomic is K, Measure (and K again with -a for
// write and read), then the two sides exchange their reports; each round
// of send_bw is Prepare, K, Measure, the report exchange (and K with -a).
// Then close.
func (p *Session) RunDuplex(test Test, local []PerftestDest, rounds int, h Hooks) ([]PerftestDest, error) {
	if !test.IsBW() {
		return nil, fmt.Errorf("oob: bidirectional %v is not supported", test)
	}
	return p.run(test, local, rounds, true, h)
}

// sequence is one run of Run or RunDuplex: the session, the test and
// the caller's QPs and hooks.
type sequence struct {
	p      *Session
	test   Test
	local  []PerftestDest
	remote []PerftestDest
	rounds int
	h      Hooks
}

func (p *Session) run(test Test, local []PerftestDest, rounds int, duplex bool, h Hooks) ([]PerftestDest, error) {
	if h.Connect == nil {
		return nil, ErrNoConnect
	}
	if len(local) == 0 {
		return nil, fmt.Errorf("oob: %v needs at least one QP", test)
	}
	sq := &sequence{p: p, test: test, local: local, rounds: max(rounds, 1), h: h}
	if err := sq.connect(); err != nil {
		return sq.remote, err
	}
	// From here on a handshake may wait for the peer's whole run.
	p.s.timeout = p.WaitTimeout
	return sq.remote, sq.rest(duplex)
}

// handshake is the keys exchange perftest makes to synchronise the sides
// (ctx_hand_shake with the first QP's keys); the peer's keys are dropped.
func (sq *sequence) handshake() error {
	_, err := sq.p.Keys(sq.local[0])
	return err
}

// handshakeIf is handshake when cond holds.
func (sq *sequence) handshakeIf(cond bool) error {
	if !cond {
		return nil
	}
	return sq.handshake()
}

// exchangeKeys is the per-QP keys exchange; it (re)fills remote.
func (sq *sequence) exchangeKeys() error {
	for i := range sq.local {
		var err error
		if sq.remote[i], err = sq.p.Keys(sq.local[i]); err != nil {
			return err
		}
	}
	return nil
}

// connect runs the exchanges up to Connected: the keys, Connect, and the
// handshakes around them that depend on the test.
func (sq *sequence) connect() error {
	test := sq.test
	if err := sq.handshakeIf(test == WriteLat || test == ReadLat); err != nil {
		return err
	}
	sq.remote = make([]PerftestDest, len(sq.local))
	if err := sq.exchangeKeys(); err != nil {
		sq.remote = nil
		return err
	}
	if err := sq.h.Connect(sq.remote); err != nil {
		return fmt.Errorf("oob: connect QPs: %w", err)
	}
	send := test == SendBW || test == SendLat
	if err := sq.handshakeIf(send); err != nil {
		return err
	}
	if err := sq.exchangeKeys(); err != nil {
		return err
	}
	// Not send: "an additional handshake after moving qp to RTR".
	if err := sq.handshakeIf(!send); err != nil {
		return err
	}
	if sq.h.Connected != nil {
		return sq.h.Connected(sq.remote)
	}
	return nil
}

// rest runs the rounds and the closing exchanges after Connected.
func (sq *sequence) rest(duplex bool) error {
	server := sq.p.s.role == Server
	switch test := sq.test; {
	case duplex:
		return sq.roundsThenClose(sq.duplexRound)
	case test == WriteBW || test == ReadBW || test == AtomicBW:
		if server {
			return sq.bwServer()
		}
		return sq.bwClient()
	case test == SendBW || test == SendLat:
		return sq.roundsThenClose(sq.sendRound)
	case test == WriteLat:
		_, err := sq.measureAll()
		return err
	case test == ReadLat:
		if !server {
			if _, err := sq.measureAll(); err != nil {
				return err
			}
		}
		return sq.p.Close(sq.local[0])
	}
	return fmt.Errorf("oob: unknown test %v", sq.test)
}

// measure runs Hooks.Measure for round r, if set.
func (sq *sequence) measure(r int) (BWReport, error) {
	if sq.h.Measure == nil {
		return BWReport{}, nil
	}
	rep, err := sq.h.Measure(r)
	if err != nil {
		return rep, fmt.Errorf("oob: %v round %d: %w", sq.test, r, err)
	}
	return rep, nil
}

// measureAll measures every round and returns the last round's report.
func (sq *sequence) measureAll() (BWReport, error) {
	var last BWReport
	for r := 0; r < sq.rounds; r++ {
		var err error
		if last, err = sq.measure(r); err != nil {
			return last, err
		}
	}
	return last, nil
}

// prepare runs Hooks.Prepare for round r, if set.
func (sq *sequence) prepare(r int) error {
	if sq.h.Prepare == nil {
		return nil
	}
	return sq.h.Prepare(r)
}

// bwServer is the server of write/read/atomic bw: it waits out the
// client's run in one handshake, takes its report and closes.
func (sq *sequence) bwServer() error {
	if err := sq.handshake(); err != nil {
		return err
	}
	// perftest's server sends an uninitialised report; zeros here.
	rep, err := sq.p.Report(BWReport{})
	if err != nil {
		return err
	}
	if sq.h.ServerReport != nil {
		if err := sq.h.ServerReport(rep); err != nil {
			return err
		}
	}
	return sq.p.Close(sq.local[0])
}

// bwClient is the client of write/read/atomic bw: its rounds, then a
// handshake, its last report to the server, and close.
func (sq *sequence) bwClient() error {
	last, err := sq.measureAll()
	if err != nil {
		return err
	}
	if err := sq.handshake(); err != nil {
		return err
	}
	if _, err := sq.p.Report(last); err != nil {
		return err
	}
	return sq.p.Close(sq.local[0])
}

// roundsThenClose runs round for each round, then closes.
func (sq *sequence) roundsThenClose(round func(r int) error) error {
	for r := 0; r < sq.rounds; r++ {
		if err := round(r); err != nil {
			return err
		}
	}
	return sq.p.Close(sq.local[0])
}

// sendRound is a round of send_bw and send_lat: Prepare, a handshake and
// Measure, and with -a a handshake after each send_bw round.
func (sq *sequence) sendRound(r int) error {
	if err := sq.prepare(r); err != nil {
		return err
	}
	if err := sq.handshake(); err != nil {
		return err
	}
	if _, err := sq.measure(r); err != nil {
		return err
	}
	return sq.handshakeIf(sq.test == SendBW && sq.rounds > 1)
}

// duplexRound is one round of RunDuplex: (Prepare for send_bw), a
// handshake, Measure, (with -a a handshake for write and read), the report
// exchange, DuplexReport, (with -a a handshake for send_bw).
func (sq *sequence) duplexRound(r int) error {
	test, multi := sq.test, sq.rounds > 1
	if test == SendBW {
		if err := sq.prepare(r); err != nil {
			return err
		}
	}
	if err := sq.handshake(); err != nil {
		return err
	}
	mine, err := sq.measure(r)
	if err != nil {
		return err
	}
	if err := sq.handshakeIf(multi && (test == WriteBW || test == ReadBW)); err != nil {
		return err
	}
	theirs, err := sq.p.Report(mine)
	if err != nil {
		return err
	}
	if sq.h.DuplexReport != nil {
		if err := sq.h.DuplexReport(mine, theirs); err != nil {
			return err
		}
	}
	return sq.handshakeIf(multi && test == SendBW)
}
