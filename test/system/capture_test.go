package system

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/internal/systest"
	"github.com/softnic/softnic/roce"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCaptureWriteBWOverVeth captures both sides of a softnic perf
// write_bw run over AF_XDP (8 KiB messages at IB MTU 1024: RDMA WRITE
// FIRST, six MIDDLE and LAST each) and reads the files with softnic
// inspect, which checks every ICRC, and with tshark's InfiniBand
// dissector.
func TestCaptureWriteBWOverVeth(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	dir := t.TempDir()
	serverFile, clientFile := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
	const iters = 200
	// --pcap-share 100: every frame is kept however little CPU the engines
	// get (the default share leaves frames out on a loaded host); the run's
	// 2 MiB of frames fit in a lane's 16 MiB ring, so none waits on the file.
	args := []string{"perf", "write_bw", "-s", "8192", "-m", "1024", "-n", strconv.Itoa(iters), "--pcap-share", "100"}
	sout, cout := runVethPair(t, p, bin, "write_bw --pcap",
		append(args, "-d", p.A.Ifname, "-x", indexOf(ga, p.A.Addr4()), "--pcap", serverFile),
		append(args, "-d", p.B.Ifname, "-x", indexOf(gb, p.B.Addr4()), "--pcap", clientFile))
	requireBWResult(t, "client", cout, 8192, iters)
	for _, out := range []string{sout, cout} {
		require.Regexp(t, `softnic: capture .*: \d+ frames written, 0 dropped`, out)
	}

	// softnic inspect: every frame RoCEv2 with a good ICRC; the client sent
	// at least iters messages of 8 packets and received ACKs, the server
	// the reverse.
	for _, c := range []struct {
		file            string
		writesFrom, ack string
	}{{clientFile, p.B.Addr4().String(), p.A.Addr4().String()}, {serverFile, p.B.Addr4().String(), p.A.Addr4().String()}} {
		out, err := exec.Command(bin, "inspect", c.file).CombinedOutput()
		require.NoError(t, err, "softnic inspect %s:\n%s", c.file, out)
		text := string(out)
		sum := regexp.MustCompile(`(\d+) frames: (\d+) RoCEv2 \((\d+) good, 0 bad\), 0 other`).FindStringSubmatch(text)
		require.NotNil(t, sum, "summary of %s:\n%s", c.file, tail(text))
		require.Equal(t, sum[1], sum[2])
		require.Equal(t, sum[1], sum[3])
		count := func(from, op string) int {
			return len(regexp.MustCompile(`(?m)^\s*\d+ `+regexp.QuoteMeta(from)+`:\d+ > \S+ RC_`+op+` .* ok$`).FindAllString(text, -1))
		}
		require.GreaterOrEqual(t, count(c.writesFrom, "RDMA_WRITE_FIRST"), iters, c.file)
		require.GreaterOrEqual(t, count(c.writesFrom, "RDMA_WRITE_MIDDLE"), 6*iters, c.file)
		require.GreaterOrEqual(t, count(c.writesFrom, "RDMA_WRITE_LAST"), iters, c.file)
		require.Positive(t, count(c.ack, "ACKNOWLEDGE"), c.file)
	}

	// tshark: the same opcodes through Wireshark's dissector, UDP port 4791
	// decoded as RoCEv2.
	tshark := exec.Command("tshark", "-r", clientFile, "-d", "udp.port==4791,infiniband", "-T", "fields", "-e", "infiniband.bth.opcode")
	var stderr strings.Builder
	tshark.Stderr = &stderr
	out, err := tshark.Output()
	require.NoError(t, err, "tshark:\n%s", stderr.String())
	ops := map[string]int{}
	for _, l := range strings.Fields(string(out)) {
		ops[l]++
	}
	require.GreaterOrEqual(t, ops["6"], iters, "RDMA WRITE First (tshark's opcodes: %v)", ops)
	require.GreaterOrEqual(t, ops["7"], 6*iters, "RDMA WRITE Middle")
	require.GreaterOrEqual(t, ops["8"], iters, "RDMA WRITE Last")
	require.Positive(t, ops["17"], "Acknowledge")
}

// tail is the end of a long output, for failure messages.
func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// TestDaemonCaptureOverVeth: a daemon started with --pcap captures the
// frames of the tools it serves; a tool given --pcap on an interface the
// daemon serves is told to capture there.
func TestDaemonCaptureOverVeth(t *testing.T) {
	bin, p, _, gb := vethSoftnic(t)
	runDir, file := systest.RootDir(t), filepath.Join(t.TempDir(), "daemon.pcap")
	d := systest.StartDaemon(t, bin, &p.A, runDir, "--pcap", file, "--snaplen", "128")
	dout := d.Log

	refused := p.A.Command(bin, "perf", "write_bw", "-d", p.A.Ifname, "--pcap", filepath.Join(t.TempDir(), "x.pcap"))
	refused.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+runDir)
	out, err := refused.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "a softnic daemon serves "+p.A.Ifname+" and moves this tool's frames; capture there instead")

	server := p.A.Command(bin, "perf", "write_bw", "-d", p.A.Ifname, "-s", "8192", "-m", "1024", "-n", "100")
	server.Env = append(os.Environ(), "SOFTNIC_RUN_DIR="+runDir)
	sdone := make(chan []byte, 1)
	go func() { out, _ := server.CombinedOutput(); sdone <- out }()
	cout, err := p.B.Command(bin, "perf", "write_bw", "-d", p.B.Ifname, "-x", indexOf(gb, p.B.Addr4()), "-s", "8192", "-m", "1024",
		"-n", "100", "--connect-wait=20s", p.A.Addr4().String()).CombinedOutput()
	sout := <-sdone
	require.NoError(t, err, "client:\n%s\nserver:\n%s", cout, sout)
	requireBWResult(t, "server through the daemon", string(sout), 8192, 100)
	require.NoError(t, d.Signal(syscall.SIGTERM))
	require.NoError(t, d.Wait(), dout.String())
	require.Regexp(t, `softnic: capture .*daemon.pcap: \d+ frames written, 0 dropped`, dout.String())

	// Frames of 128 bytes: inspect cannot check their ICRCs, tshark reads
	// their headers.
	tshark := exec.Command("tshark", "-r", file, "-d", "udp.port==4791,infiniband", "-T", "fields", "-e", "infiniband.bth.opcode",
		"-e", "frame.cap_len")
	out, err = tshark.Output()
	require.NoError(t, err)
	ops := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 2, "line %q", l)
		capLen, _ := strconv.Atoi(f[1])
		require.LessOrEqual(t, capLen, 128)
		ops[f[0]]++
	}
	require.GreaterOrEqual(t, ops["6"], 100, "RDMA WRITE First received by the daemon (%v)", ops)
	require.GreaterOrEqual(t, ops["8"], 100, "RDMA WRITE Last")
	require.Positive(t, ops["17"], "Acknowledge sent")
}

// TestRpingCaptureOverVeth: rping takes --pcap among its C-style options;
// the server's capture holds the connection's MADs and the pings' READs
// and WRITEs, every ICRC good.
func TestRpingCaptureOverVeth(t *testing.T) {
	bin, p, _, _ := vethSoftnic(t)
	file := filepath.Join(t.TempDir(), "rping.pcap")
	addr := p.A.Addr4().String()
	srv := p.A.Command(bin, "rping", "-s", "--pcap", file, "-a", addr, "-C", "10")
	var sout strings.Builder
	srv.Stdout, srv.Stderr = &sout, &sout
	require.NoError(t, srv.Start())
	cout, cerr := rpingClientWhenListening(t, func() *exec.Cmd {
		return p.B.Command(bin, "rping", "-c", "-a", addr, "-C", "10")
	})
	serr := srv.Wait()
	require.True(t, cerr == nil && serr == nil, "client %v:\n%s\nserver %v:\n%s", cerr, cout, serr, sout.String())
	require.Regexp(t, `softnic: capture .*rping.pcap: \d+ frames written, 0 dropped`, sout.String())
	out, err := exec.Command(bin, "inspect", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"CM_REQ", "CM_REP", "CM_RTU", "RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE", "RC_RDMA_WRITE_ONLY", "RC_SEND_ONLY"} {
		assert.Contains(t, string(out), " "+want, "softnic inspect of the server's capture:\n%s", tail(string(out)))
	}
}

// TestCaptureKilledLeavesReadableFile: a client killed (SIGKILL) in the
// middle of a write_bw with --pcap leaves a file of whole records, RoCEv2
// frames with good ICRCs, and at most the start of one more at its end,
// which tshark reads as a capture cut short.
func TestCaptureKilledLeavesReadableFile(t *testing.T) {
	bin, p, ga, gb := vethSoftnic(t)
	file := filepath.Join(t.TempDir(), "killed.pcap")
	args := []string{"perf", "write_bw", "-s", "65536", "-m", "1024", "-D", "60"}
	server := p.A.Command(bin, append(args, "-d", p.A.Ifname, "-x", indexOf(ga, p.A.Addr4()))...)
	require.NoError(t, server.Start())
	defer func() { server.Process.Kill(); server.Wait() }()
	client := p.B.Command(bin, append(args, "-d", p.B.Ifname, "-x", indexOf(gb, p.B.Addr4()), "--pcap", file,
		"--connect-wait=20s", p.A.Addr4().String())...)
	require.NoError(t, client.Start())
	defer client.Wait()
	// Several of the capture's 2 MiB windows written, then the kill.
	require.Eventually(t, func() bool {
		st, err := os.Stat(file)
		return err == nil && st.Size() > 8<<20
	}, time.Minute, 10*time.Millisecond, "the capture file grows")
	require.NoError(t, client.Process.Signal(syscall.SIGKILL))
	client.Wait()

	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, uint32(0xa1b23c4d), binary.LittleEndian.Uint32(b), "the pcap file header")
	b = b[pcapfile.HeaderLen:]
	whole := 0
	for len(b) >= pcapfile.RecordHeaderLen {
		n := int(binary.LittleEndian.Uint32(b[8:]))
		if len(b) < pcapfile.RecordHeaderLen+n {
			break // the torn last record
		}
		var f roce.Frame
		require.NoError(t, roce.ParseFrame(b[pcapfile.RecordHeaderLen:pcapfile.RecordHeaderLen+n], &f), "record %d", whole+1)
		b = b[pcapfile.RecordHeaderLen+n:]
		whole++
	}
	require.Less(t, len(b), pcapfile.RecordHeaderLen+1100, "at most one record torn")
	require.Greater(t, whole, 5000)
	t.Logf("%d whole records, then %d bytes of a torn one", whole, len(b))

	tshark := exec.Command("tshark", "-r", file)
	var stderr strings.Builder
	tshark.Stderr = &stderr
	out, err := tshark.Output()
	if len(b) > 0 {
		require.Contains(t, stderr.String(), "cut short in the middle of a packet")
	} else {
		require.NoError(t, err, stderr.String())
	}
	require.Equal(t, whole, strings.Count(string(out), "\n"), "tshark reads every whole record")

	// softnic inspect: every whole record, its summary, then what is torn.
	inspect := exec.Command(bin, "inspect", file)
	stderr.Reset()
	inspect.Stderr = &stderr
	out, err = inspect.Output()
	sum := fmt.Sprintf("%d frames: %d RoCEv2 (%d good, 0 bad), 0 other", whole, whole, whole)
	require.Contains(t, string(out), sum)
	if len(b) > 0 {
		require.Contains(t, stderr.String(), "cut short in the middle of a frame after the frames above")
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 2, exit.ExitCode())
	} else {
		require.NoError(t, err)
	}
}
