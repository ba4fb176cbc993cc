package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/softnic/softnic/roce"
	devcapture "github.com/softnic/softnic/roce/capture"
)

// captureFlags are --pcap, --pcap-size, --snaplen and --pcap-share: a
// packet capture of the frames the device softnic opens sends and
// receives (roce/capture).
type captureFlags struct {
	file    string
	size    byteSize
	snaplen int
	share   int
	// several is set by a daemon that serves several interfaces (pathFor).
	several bool
}

// capture is the command line's capture; openInterface starts it on the
// device it opens.
var capture captureFlags

const (
	pcapUsage     = "softnic: write the RoCEv2 frames the device sends and receives to `FILE`, a classic pcap file (tshark -r FILE, softnic inspect FILE)"
	pcapSizeUsage = "softnic: with --pcap, stop capturing when the next frame would make FILE larger than `SIZE` bytes (K, M, G suffixes: powers of 1024; default 0: no limit); the capture stops, it does not rotate"
	snaplenUsage  = "softnic: with --pcap, keep at most `N` bytes of each frame (default 0: 262144, every frame whole; softnic inspect checks the ICRC of whole frames only)"
	shareUsage    = "softnic: with --pcap, the most of its time, in `PERCENT`, an engine may spend copying frames into the capture; frames past it are left out and counted (100: keep every frame the file keeps up with, at the traffic's cost)"
)

// define registers the capture flags on fs.
func (c *captureFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&c.file, "pcap", "", pcapUsage)
	fs.Var(&c.size, "pcap-size", pcapSizeUsage)
	fs.IntVar(&c.snaplen, "snaplen", 0, snaplenUsage)
	fs.IntVar(&c.share, "pcap-share", devcapture.DefaultShare, shareUsage)
}

// check refuses capture flags that make no sense.
func (c *captureFlags) check() error {
	switch {
	case c.snaplen < 0:
		return fmt.Errorf("--snaplen %d: must not be negative", c.snaplen)
	case c.share < 1 || c.share > 100:
		return fmt.Errorf("--pcap-share %d: a percentage from 1 to 100", c.share)
	case c.file == "" && (c.size != 0 || c.snaplen != 0 || c.share != devcapture.DefaultShare):
		return errors.New("--pcap-size, --snaplen and --pcap-share go with --pcap FILE")
	}
	return nil
}

// pathFor is the file of the capture on ifname: the --pcap file itself,
// or with several interfaces (a daemon's -d list) one file each, named
// after the interface (cap.pcap: cap-eth0.pcap, cap-eth1.pcap).
func (c *captureFlags) pathFor(ifname string) string {
	if !c.several || c.file == "" {
		return c.file
	}
	ext := filepath.Ext(c.file)
	return strings.TrimSuffix(c.file, ext) + "-" + ifname + ext
}

// start starts the capture on dev into path; the returned function stops
// it and prints what it wrote on stderr.
func (c *captureFlags) start(dev *roce.Device, path string, stderr io.Writer) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--pcap: %w", err)
	}
	run, err := devcapture.Start(dev, devcapture.Config{W: f, Snaplen: c.snaplen, Limit: int64(c.size), Share: c.share})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--pcap %s: %w", path, err)
	}
	return func() {
		err := run.Stop()
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("--pcap %s: %w", path, cerr)
		}
		s := run.Stats()
		fmt.Fprintf(stderr, "softnic: capture %s: %d frames written, %d dropped", path, s.Written, s.Dropped)
		if s.Dropped > 0 {
			fmt.Fprintf(stderr, " (past the engines' %d%% share of their time for the capture, or the file fell behind: "+
				"--pcap-share 100 keeps more at the traffic's cost, --snaplen 128 keeps every frame's headers)", c.share)
		}
		if s.Truncated {
			fmt.Fprintf(stderr, ", stopped at --pcap-size %d", c.size)
		}
		fmt.Fprintln(stderr)
		if err != nil {
			fmt.Fprintf(stderr, "softnic: %v\n", err)
		}
	}, nil
}

// byteSize is a size in bytes with an optional K, M or G suffix.
type byteSize int64

func (s *byteSize) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *byteSize) Set(v string) error {
	shift := 0
	switch {
	case strings.HasSuffix(v, "K"):
		shift = 10
	case strings.HasSuffix(v, "M"):
		shift = 20
	case strings.HasSuffix(v, "G"):
		shift = 30
	}
	if shift > 0 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return fmt.Errorf("%q: not a size such as 500M", v)
	}
	*s = byteSize(n << shift)
	return nil
}

// errCaptureThroughDaemon is the error of a tool given --pcap on an
// interface a daemon serves: the frames are the daemon's.
func errCaptureThroughDaemon(ifname string) error {
	return fmt.Errorf("--pcap: a softnic daemon serves %s and moves this tool's frames; "+
		"capture there instead (softnic daemon -d %s --pcap FILE), or stop the daemon to run the tool on the interface itself", ifname, ifname)
}

// takeCaptureArgs removes softnic's capture options (--pcap FILE,
// --pcap=FILE, and the same for --pcap-size, --snaplen and --pcap-share) from a command
// line parsed by getopt (rping), whose C option syntax has no room for
// them, and applies them to c. It returns the rest.
func (c *captureFlags) takeArgs(args []string) ([]string, error) {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.define(fs)
	var rest []string
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "--") || fs.Lookup(name) == nil {
			rest = append(rest, args[i])
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			value = args[i]
		}
		if err := fs.Set(name, value); err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
	}
	return rest, c.check()
}
