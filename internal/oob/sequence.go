package oob

import (
	"errors"
	"fmt"
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
	return 0, fmt.Errorf("oob: unknown perftest test %q", name)
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

func (p *Session) run(test Test, local []PerftestDest, rounds int, duplex bool, h Hooks) ([]PerftestDest, error) {
	if h.Connect == nil {
		return nil, ErrNoConnect
	}
	if len(local) == 0 {
		return nil, fmt.Errorf("oob: %v needs at least one QP", test)
	}
	if rounds < 1 {
		rounds = 1
	}
	remote := make([]PerftestDest, len(local))
	var err error
	if test == WriteLat || test == ReadLat {
		if _, err = p.Keys(local[0]); err != nil {
			return nil, err
		}
	}
	for i := range local {
		if remote[i], err = p.Keys(local[i]); err != nil {
			return nil, err
		}
	}
	if err := h.Connect(remote); err != nil {
		return remote, fmt.Errorf("oob: connect QPs: %w", err)
	}
	if test == SendBW || test == SendLat {
		if _, err = p.Keys(local[0]); err != nil {
			return remote, err
		}
	}
	for i := range local {
		if remote[i], err = p.Keys(local[i]); err != nil {
			return remote, err
		}
	}
	if test != SendBW && test != SendLat {
		if _, err = p.Keys(local[0]); err != nil {
			return remote, err
		}
	}
	if h.Connected != nil {
		if err := h.Connected(remote); err != nil {
			return remote, err
		}
	}
	// From here on a handshake may wait for the peer's whole run.
	p.s.timeout = p.WaitTimeout
	server := p.s.role == Server
	measure := func(r int) (BWReport, error) {
		if h.Measure == nil {
			return BWReport{}, nil
		}
		rep, err := h.Measure(r)
		if err != nil {
			return rep, fmt.Errorf("oob: %v round %d: %w", test, r, err)
		}
		return rep, nil
	}
	prepare := func(r int) error {
		if h.Prepare == nil {
			return nil
		}
		return h.Prepare(r)
	}

	if duplex {
		for r := 0; r < rounds; r++ {
			if test == SendBW {
				if err := prepare(r); err != nil {
					return remote, err
				}
			}
			if _, err := p.Keys(local[0]); err != nil {
				return remote, err
			}
			mine, err := measure(r)
			if err != nil {
				return remote, err
			}
			if rounds > 1 && (test == WriteBW || test == ReadBW) {
				if _, err := p.Keys(local[0]); err != nil {
					return remote, err
				}
			}
			theirs, err := p.Report(mine)
			if err != nil {
				return remote, err
			}
			if h.DuplexReport != nil {
				if err := h.DuplexReport(mine, theirs); err != nil {
					return remote, err
				}
			}
			if rounds > 1 && test == SendBW {
				if _, err := p.Keys(local[0]); err != nil {
					return remote, err
				}
			}
		}
		return remote, p.Close(local[0])
	}

	switch test {
	case WriteBW, ReadBW, AtomicBW:
		if server {
			if _, err := p.Keys(local[0]); err != nil {
				return remote, err
			}
			// perftest's server sends an uninitialised report; zeros here.
			rep, err := p.Report(BWReport{})
			if err != nil {
				return remote, err
			}
			if h.ServerReport != nil {
				if err := h.ServerReport(rep); err != nil {
					return remote, err
				}
			}
			return remote, p.Close(local[0])
		}
		var last BWReport
		for r := 0; r < rounds; r++ {
			if last, err = measure(r); err != nil {
				return remote, err
			}
		}
		if _, err := p.Keys(local[0]); err != nil {
			return remote, err
		}
		if _, err := p.Report(last); err != nil {
			return remote, err
		}
		return remote, p.Close(local[0])

	case SendBW, SendLat:
		for r := 0; r < rounds; r++ {
			if err := prepare(r); err != nil {
				return remote, err
			}
			if _, err := p.Keys(local[0]); err != nil {
				return remote, err
			}
			if _, err := measure(r); err != nil {
				return remote, err
			}
			if test == SendBW && rounds > 1 {
				if _, err := p.Keys(local[0]); err != nil {
					return remote, err
				}
			}
		}
		return remote, p.Close(local[0])

	case WriteLat:
		for r := 0; r < rounds; r++ {
			if _, err := measure(r); err != nil {
				return remote, err
			}
		}
		return remote, nil

	case ReadLat:
		if !server {
			for r := 0; r < rounds; r++ {
				if _, err := measure(r); err != nil {
					return remote, err
				}
			}
		}
		return remote, p.Close(local[0])
	}
	return remote, fmt.Errorf("oob: unknown test %v", test)
}
