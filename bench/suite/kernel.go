package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
)

// tcpStream runs one iperf3 TCP stream from B to A for s.duration and
// returns the receiver's rate in Gb/s.
func (s *suite) tcpStream(ctx context.Context, p *netnstest.Pair) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.duration+30*time.Second)
	defer cancel()
	addr := p.A.Addr4().String()
	server := exec.CommandContext(ctx, "ip", "netns", "exec", p.A.Namespace, "iperf3", "-s", "-B", addr)
	var serverOut syncbuf.Buffer
	server.Stdout, server.Stderr = &serverOut, &serverOut
	server.WaitDelay = time.Second
	if err := server.Start(); err != nil {
		return 0, fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() {
		server.Process.Kill()
		server.Wait()
	}()
	secs := strconv.Itoa(max(1, int(s.duration.Round(time.Second).Seconds())))
	// The server needs a moment to listen and iperf3 clients do not retry
	// (nor do they always exit non-zero when they fail).
	deadline := time.Now().Add(10 * time.Second)
	for {
		client := exec.CommandContext(ctx, "ip", "netns", "exec", p.B.Namespace, "iperf3", "-c", addr, "-t", secs, "-J")
		out, err := client.Output()
		gbps, err := parseIperf3(out, err)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			if err != nil {
				err = fmt.Errorf("%w (server: %s)", err, lastLine(serverOut.String()))
			}
			return gbps, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// parseIperf3 reads the receiver's rate in Gb/s from iperf3's JSON report.
func parseIperf3(out []byte, runErr error) (float64, error) {
	var rep struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		if runErr != nil {
			return 0, fmt.Errorf("iperf3 client: %w", runErr)
		}
		return 0, fmt.Errorf("iperf3 JSON: %w", err)
	}
	switch {
	case rep.Error != "":
		return 0, fmt.Errorf("iperf3: %s", rep.Error)
	case runErr != nil:
		return 0, fmt.Errorf("iperf3 client: %w", runErr)
	case rep.End.SumReceived.BitsPerSecond <= 0:
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
// echo server in A, iters times after a warm-up. Like softnic perf's two
// sides, the two ends are separate processes: the echo server is this
// program again (-udp-echo) under `ip netns exec`. Both use blocking system
// calls (no Go netpoller in the way: the kernel at its best, as sockperf
// runs it). It reports half the round trip, as sockperf and perftest's
// write_lat do.
func (s *suite) udpPingPong(ctx context.Context, p *netnstest.Pair, size, iters int) (udpResult, error) {
	const port = 17999
	self, err := os.Executable()
	if err != nil {
		return udpResult{}, err
	}
	to := &unix.SockaddrInet4{Port: port, Addr: p.A.Addr4().As4()}
	echo := exec.CommandContext(ctx, "ip", "netns", "exec", p.A.Namespace, self, "-udp-echo",
		netip.AddrPortFrom(p.A.Addr4(), port).String())
	var echoOut syncbuf.Buffer
	echo.Stdout, echo.Stderr = &echoOut, &echoOut
	echo.WaitDelay = time.Second
	if err := echo.Start(); err != nil {
		return udpResult{}, fmt.Errorf("echo server: %w", err)
	}
	defer func() {
		echo.Process.Kill()
		echo.Wait()
	}()

	var fd int
	if err := p.B.Do(func() (err error) { fd, err = udpSocket(netip.AddrPortFrom(p.B.Addr4(), port)); return err }); err != nil {
		return udpResult{}, fmt.Errorf("ping socket: %w", err)
	}
	defer unix.Close(fd)
	msg := make([]byte, size)
	buf := make([]byte, 65536)
	// The echo server needs a moment to bind: retry the first round trip.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := unix.Sendto(fd, msg, 0, to); err != nil {
			return udpResult{}, fmt.Errorf("send: %w", err)
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}); err != nil {
			return udpResult{}, err
		}
		if _, _, err := unix.Recvfrom(fd, buf, 0); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return udpResult{}, fmt.Errorf("no echo from %v: %s", to.Addr, lastLine(echoOut.String()))
		}
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
		return udpResult{}, err
	}
	// Late echoes of the retries must not pass for round trips.
	for {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	warm := iters / 10
	rtt := make([]time.Duration, 0, iters)
	for i := 0; i < warm+iters; i++ {
		t0 := time.Now()
		if err := retryEINTR(func() error { return unix.Sendto(fd, msg, 0, to) }); err != nil {
			return udpResult{}, fmt.Errorf("send: %w", err)
		}
		if err := retryEINTR(func() error { _, _, err := unix.Recvfrom(fd, buf, 0); return err }); err != nil {
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

// retryEINTR repeats a blocking system call that a signal interrupted (the
// Go runtime preempts goroutines with signals).
func retryEINTR(call func() error) error {
	for {
		if err := call(); err != unix.EINTR {
			return err
		}
	}
}

// udpSocket returns a blocking UDP socket bound to addr.
func udpSocket(addr netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %v: %w", addr, err)
	}
	return fd, nil
}

// udpEcho is the echo side of the ping-pong (-udp-echo): it sends every
// datagram back until killed.
func udpEcho(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	fd, err := udpSocket(ap)
	if err != nil {
		return err
	}
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if err := retryEINTR(func() error { return unix.Sendto(fd, buf[:n], 0, from) }); err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
}
