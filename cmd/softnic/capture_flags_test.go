package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "10K": 10 << 10, "500M": 500 << 20, "2G": 2 << 30} {
		var s byteSize
		require.NoError(t, s.Set(in), in)
		assert.Equal(t, want, int64(s), in)
	}
	for _, in := range []string{"", "K", "-1", "1.5M", "10T", "99999999999G"} {
		var s byteSize
		assert.Error(t, s.Set(in), in)
	}
}

// TestCaptureArgsOutOfGetopt: rping's command line keeps its own options
// and loses softnic's capture options, in both spellings.
func TestCaptureArgsOutOfGetopt(t *testing.T) {
	var c captureFlags
	rest, err := c.takeArgs([]string{"-c", "--pcap", "/tmp/x.pcap", "-a", "10.0.0.1", "--snaplen=128", "-vV", "--pcap-size", "1M",
		"--pcap-share", "100"})
	require.NoError(t, err)
	assert.Equal(t, []string{"-c", "-a", "10.0.0.1", "-vV"}, rest)
	assert.Equal(t, captureFlags{file: "/tmp/x.pcap", snaplen: 128, size: 1 << 20, share: 100}, c)

	for _, bad := range [][]string{{"--pcap"}, {"--pcap", "f", "--snaplen", "-3"}, {"--snaplen", "64"}, {"--pcap", "f", "--pcap-size", "lots"},
		{"--pcap", "f", "--pcap-share", "0"}, {"--pcap", "f", "--pcap-share", "101"}, {"--pcap-share", "50"}} {
		var c captureFlags
		_, err := c.takeArgs(bad)
		assert.Error(t, err, "%v", bad)
	}
}

// TestCapturePathPerInterface: a daemon of several interfaces writes a
// file each.
func TestCapturePathPerInterface(t *testing.T) {
	c := captureFlags{file: "/var/tmp/cap.pcap"}
	assert.Equal(t, "/var/tmp/cap.pcap", c.pathFor("eth0"))
	c.several = true
	assert.Equal(t, "/var/tmp/cap-eth0.pcap", c.pathFor("eth0"))
	assert.Equal(t, "/var/tmp/cap-eth1.pcap", c.pathFor("eth1"))
	c.file = "noext"
	assert.Equal(t, "noext-eth0", c.pathFor("eth0"))
	assert.Equal(t, "", (&captureFlags{several: true}).pathFor("eth0"))
}

// FuzzCaptureArgs: no command line makes takeArgs panic, and what it
// leaves holds no capture option.
func FuzzCaptureArgs(f *testing.F) {
	f.Add("-c --pcap f -a 1.2.3.4 --snaplen=64")
	f.Add("--pcap-size 1G --pcap")
	f.Fuzz(func(t *testing.T, line string) {
		var c captureFlags
		rest, err := c.takeArgs(strings.Fields(line))
		if err != nil {
			return
		}
		for _, a := range rest {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(a, "--") && (name == "pcap" || name == "pcap-size" || name == "snaplen" || name == "pcap-share") {
				t.Fatalf("%q left in %q", a, rest)
			}
		}
	})
}
