package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/softnic/softnic/internal/netnstest"
)

// The capture part measures what `--pcap` costs: write_bw of 64 KiB on the
// 9000-byte veth at IB MTU 4096 without a capture, with one on both sides
// (whole frames, each side its own file), on the sender only, with one of
// the first 128 bytes of each frame (the headers), and on the sender only
// with --pcap-share 100 (every frame the file keeps up with, at the
// traffic's cost), in interleaved rounds. The files are removed after
// each run: at this rate a run writes gigabytes.

// captureRounds measures the three series.
func (s *suite) captureRounds(ctx context.Context, p *netnstest.Pair) {
	fmt.Printf("== 9000-byte veth: write_bw 64 KiB without and with --pcap on both sides, in %d interleaved rounds\n", s.repeat)
	dir, err := os.MkdirTemp("", "softnic-bench-pcap")
	if err != nil {
		s.report(&Figure{Key: "capture/pcap", Group: groupSoftnic, Name: "write_bw 64 KiB with --pcap", Err: err.Error()})
		return
	}
	defer os.RemoveAll(dir)
	fig := func(key, name string) *Figure {
		return &Figure{Key: "capture/" + key, Group: groupSoftnic, Unit: unitGbps, Name: name + ", IB MTU 4096, 9000-byte link"}
	}
	plain := s.perfSeries(ctx, p, fig("none", "write_bw 64 KiB without capture"), "write_bw", 64<<10, 4096, 1, gbps)
	file := filepath.Join(dir, "capture-"+ifacePlaceholder+".pcap")
	whole := s.captureSeries(ctx, p, fig("pcap", "write_bw 64 KiB with --pcap on both sides"), dir, false, file)
	sender := s.captureSeries(ctx, p, fig("pcapsender", "write_bw 64 KiB with --pcap on the sender only"), dir, true, file)
	headers := s.captureSeries(ctx, p, fig("pcap128", "write_bw 64 KiB with --pcap --snaplen 128 on both sides"), dir, false, file,
		"--snaplen", "128")
	every := s.captureSeries(ctx, p, fig("pcapshare100", "write_bw 64 KiB with --pcap --pcap-share 100 on the sender only"), dir, true,
		file, "--pcap-share", "100")
	s.rounds(plain, whole, sender, headers, every)
}

// captureSeries is write_bw 64 KiB with --pcap file and extra flags, on
// both sides or the sender's (the client's) only: one host capturing its
// traffic, where both sides' captures share this machine's two CPUs. The
// files go after each run.
func (s *suite) captureSeries(ctx context.Context, p *netnstest.Pair, f *Figure, dir string, senderOnly bool, file string, extra ...string) *series {
	iters := 0
	var both, client []string
	if senderOnly {
		client = append([]string{"--pcap", file}, extra...)
	} else {
		both = append([]string{"--pcap", file}, extra...)
	}
	return &series{fig: f, measure: func() (float64, string, error) {
		defer func() {
			os.Remove(filepath.Join(dir, "capture-"+p.A.Ifname+".pcap"))
			os.Remove(filepath.Join(dir, "capture-"+p.B.Ifname+".pcap"))
		}()
		if iters == 0 {
			n, err := s.bwIters(ctx, p, "write_bw", 64<<10, 4096, 1, append(both, client...)...)
			if err != nil {
				return 0, "", err
			}
			iters = n
		}
		r, err := s.bwRunSides(ctx, p, "write_bw", 64<<10, 4096, 1, iters, both, client)
		if err != nil {
			return 0, "", err
		}
		note := fmt.Sprintf("%d messages a run", r.Iters)
		if m := captureLine.FindStringSubmatch(r.Client); m != nil {
			note += fmt.Sprintf(", the client's capture %s frames written, %s dropped", m[1], m[2])
		}
		return r.Avg, note, nil
	}}
}

// captureLine is the line softnic prints when a capture ends.
var captureLine = regexp.MustCompile(`softnic: capture \S+: (\d+) frames written, (\d+) dropped`)
