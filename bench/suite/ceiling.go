package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// blastResult is one xdpblast line.
type blastResult struct {
	Size, MTU       int
	Sent, Received  uint64
	FramesPerSecond float64
	Gbps            float64 // Ethernet frame bytes received
}

// blast runs xdpblast for one frame size on a link of mtu bytes.
func (s *suite) blast(ctx context.Context, size, mtu int) (blastResult, error) {
	out, err := s.runXDPBlast(ctx, s.duration+60*time.Second, "xdpblast", "-size", strconv.Itoa(size), "-mtu", strconv.Itoa(mtu),
		"-duration", s.duration.String())
	if err != nil {
		return blastResult{}, err
	}
	return parseBlast(out)
}

// runXDPBlast runs xdpblast with args for at most timeout and returns its
// output; what names the run in an error.
func (s *suite) runXDPBlast(ctx context.Context, timeout time.Duration, what string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.xdpblast, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v: %s", what, err, lastLine(out.String()))
	}
	return out.String(), nil
}

// parseBlast reads the result line of xdpblast's table
// ("size mtu sent received frames/s Gb/s").
func parseBlast(out string) (blastResult, error) {
	f, v, err := reportValues(out, "frames/s", 6)
	if err != nil {
		return blastResult{}, err
	}
	if v[3] == 0 {
		return blastResult{}, fmt.Errorf("xdpblast received nothing: %s", strings.Join(f, " "))
	}
	return blastResult{Size: int(v[0]), MTU: int(v[1]), Sent: uint64(v[2]), Received: uint64(v[3]),
		FramesPerSecond: v[4], Gbps: v[5]}, nil
}

// pingResult is an xdpblast -pingpong line: half round trips in µs.
type pingResult struct {
	Size, MTU, Rounds, Lost int
	Median, P99, Min, Max   float64
	Avg                     float64
}

// xdpPingPong runs xdpblast's raw AF_XDP ping-pong of rounds round trips of
// size-byte frames on a link of mtu bytes.
func (s *suite) xdpPingPong(ctx context.Context, size, mtu, rounds int) (pingResult, error) {
	out, err := s.runXDPBlast(ctx, 60*time.Second, "xdpblast -pingpong", "-pingpong", "-size", strconv.Itoa(size), "-mtu", strconv.Itoa(mtu),
		"-rounds", strconv.Itoa(rounds))
	if err != nil {
		return pingResult{}, err
	}
	return parsePingPong(out)
}

// parsePingPong reads the result line of xdpblast -pingpong
// ("size mtu rounds lost median_us p99_us min_us max_us avg_us").
func parsePingPong(out string) (pingResult, error) {
	f, v, err := reportValues(out, "median_us", 9)
	if err != nil {
		return pingResult{}, err
	}
	if v[2] == 0 || v[4] <= 0 {
		return pingResult{}, fmt.Errorf("xdpblast -pingpong measured nothing: %s", strings.Join(f, " "))
	}
	return pingResult{Size: int(v[0]), MTU: int(v[1]), Rounds: int(v[2]), Lost: int(v[3]),
		Median: v[4], P99: v[5], Min: v[6], Max: v[7], Avg: v[8]}, nil
}

// Frame sizes of softnic's RoCEv2 packets over IPv4 without VLAN:
// Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4, and RETH 16 on
// the first packet of a WRITE. The ceiling is measured at the size of the
// packets that carry the bulk of a 64 KiB message (MIDDLE: BTH only).
const roceOverhead = 14 + 20 + 8 + 12 + 4

func bulkFrame(ibMTU int) int { return roceOverhead + ibMTU }

// smallWriteFrame is the frame of a 64-byte RDMA WRITE ONLY (with RETH).
const smallWriteFrame = roceOverhead + 16 + 64

// latWriteFrame is the frame of write_lat's 8-byte RDMA WRITE ONLY.
const latWriteFrame = roceOverhead + 16 + 8
