package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/netnstest"
)

// tcpStream runs one iperf3 TCP stream from B to A for s.duration and
// returns the receiver's rate in Gb/s.
func (s *suite) tcpStream(ctx context.Context, p *netnstest.Pair) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.duration+30*time.Second)
	defer cancel()
	addr := p.A.Addr4().String()
	server := exec.CommandContext(ctx, "ip", "netns", "exec", p.A.Namespace, "iperf3", "-s", "-1", "-B", addr)
	server.WaitDelay = time.Second
	if err := server.Start(); err != nil {
		return 0, fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() {
		server.Process.Kill()
		server.Wait()
	}()
	secs := strconv.Itoa(max(1, int(s.duration.Round(time.Second).Seconds())))
	var out []byte
	var err error
	// The server needs a moment to listen; iperf3 clients do not retry.
	for try := 0; try < 20; try++ {
		client := exec.CommandContext(ctx, "ip", "netns", "exec", p.B.Namespace, "iperf3", "-c", addr, "-t", secs, "-J")
		out, err = client.Output()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var rep struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		if err != nil {
			return 0, fmt.Errorf("iperf3 client: %w", err)
		}
		return 0, fmt.Errorf("iperf3 JSON: %w", jerr)
	}
	if rep.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", rep.Error)
	}
	if err != nil {
		return 0, fmt.Errorf("iperf3 client: %w", err)
	}
	if rep.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3 reported no received bytes")
	}
	return rep.End.SumReceived.BitsPerSecond / 1e9, nil
}

// udpResult is a UDP ping-pong's half round trips in microseconds.
type udpResult struct {
	Median, P99 float64
	Rounds      int
}

// udpPingPong bounces a size-byte UDP datagram between a socket in B and an
// echo socket in A, iters times after a warm-up, with blocking system calls
// (no Go netpoller in the way: the kernel at its best), and reports half
// the round trip as sockperf and perftest's write_lat do.
func (s *suite) udpPingPong(p *netnstest.Pair, size, iters int) (udpResult, error) {
	const port = 17999
	var echoFD, pingFD int
	a4, b4 := p.A.Addr4().As4(), p.B.Addr4().As4()
	open := func(addr [4]byte, fd *int) error {
		var err error
		if *fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		tv := unix.Timeval{Sec: 2}
		if err := unix.SetsockoptTimeval(*fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(*fd, &unix.SockaddrInet4{Port: port, Addr: addr})
	}
	if err := p.A.Do(func() error { return open(a4, &echoFD) }); err != nil {
		return udpResult{}, fmt.Errorf("echo socket: %w", err)
	}
	defer unix.Close(echoFD)
	if err := p.B.Do(func() error { return open(b4, &pingFD) }); err != nil {
		return udpResult{}, fmt.Errorf("ping socket: %w", err)
	}
	defer unix.Close(pingFD)

	var wg sync.WaitGroup
	var stop sync.Once
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, from, err := unix.Recvfrom(echoFD, buf, 0)
			select {
			case <-done:
				return
			default:
			}
			if err != nil {
				continue // receive timeout: look at done again
			}
			unix.Sendto(echoFD, buf[:n], 0, from)
		}
	}()
	to := &unix.SockaddrInet4{Port: port, Addr: a4}
	msg := make([]byte, size)
	defer func() {
		stop.Do(func() { close(done) })
		unix.Sendto(pingFD, msg, 0, to) // wakes the echo loop to see done
		wg.Wait()
	}()

	buf := make([]byte, 65536)
	warm := iters / 10
	rtt := make([]time.Duration, 0, iters)
	for i := 0; i < warm+iters; i++ {
		t0 := time.Now()
		if err := unix.Sendto(pingFD, msg, 0, to); err != nil {
			return udpResult{}, fmt.Errorf("send: %w", err)
		}
		if _, _, err := unix.Recvfrom(pingFD, buf, 0); err != nil {
			return udpResult{}, fmt.Errorf("round trip %d: %w", i, err)
		}
		if i >= warm {
			rtt = append(rtt, time.Since(t0))
		}
	}
	slices.Sort(rtt)
	half := func(d time.Duration) float64 { return d.Seconds() * 1e6 / 2 }
	return udpResult{Median: half(rtt[len(rtt)/2]), P99: half(rtt[len(rtt)*99/100]), Rounds: len(rtt)}, nil
}
