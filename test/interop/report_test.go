package interop

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/softnic/softnic/ibtransport/header"
	"github.com/softnic/softnic/internal/pcapfile"
	"github.com/softnic/softnic/roce"
)

var (
	softnicAddr = netip.MustParseAddr("10.77.0.1")
	ppIterRE    = regexp.MustCompile(`(?m)^\d+ iters in [0-9.]+ seconds = ([0-9.]+) usec/iter$`)
)

// checkCaptures reads the pcap of every captured run: each frame must be a
// whole RoCEv2 frame whose ICRC verifies and whose IB packet parses, from
// softnic and from rxe alike, and both must have sent some. It logs what
// each file holds (opcode × count per sender).
func checkCaptures(t *testing.T, dir string, runs []interopRun) {
	t.Helper()
	for _, r := range runs {
		if r.capture == "" {
			continue
		}
		summary, err := summarizeCapture(filepath.Join(dir, r.capture))
		if assert.NoError(t, err, r.capture) {
			t.Logf("%s: %s", r.capture, summary)
		}
	}
}

// summarizeCapture checks one capture (see checkCaptures) and describes it.
func summarizeCapture(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	rd, err := pcapfile.NewReader(f)
	if err != nil {
		return "", err
	}
	ops := map[string]map[header.Opcode]int{"softnic": {}, "rxe": {}}
	frames := 0
	for i := 1; ; i++ {
		pkt, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		if pkt.LinkType != pcapfile.LinkTypeEthernet || len(pkt.Data) < pkt.OrigLen {
			return "", fmt.Errorf("frame %d: link type %d, %d of %d bytes captured", i, pkt.LinkType, len(pkt.Data), pkt.OrigLen)
		}
		var fr roce.Frame
		if err := roce.ParseFrame(append([]byte(nil), pkt.Data...), &fr); err != nil {
			return "", fmt.Errorf("frame %d: %w", i, err)
		}
		var p header.Packet
		if err := header.ParsePacket(fr.IB, &p); err != nil {
			return "", fmt.Errorf("frame %d: %w", i, err)
		}
		who := "rxe"
		if fr.Src == softnicAddr {
			who = "softnic"
		}
		ops[who][p.Opcode()]++
		frames++
	}
	if len(ops["softnic"]) == 0 || len(ops["rxe"]) == 0 {
		return "", fmt.Errorf("%d frames, want some from both softnic and rxe", frames)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d frames;", frames)
	for _, who := range []string{"softnic", "rxe"} {
		var keys []int
		for op := range ops[who] {
			keys = append(keys, int(op))
		}
		sort.Ints(keys)
		fmt.Fprintf(&b, " %s:", who)
		for _, k := range keys {
			fmt.Fprintf(&b, " %v %d×%d", header.Opcode(k), k, ops[who][header.Opcode(k)])
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";"), nil
}

// interopOutcome is pass/fail and the figure the real tool printed for one
// run in one direction.
func interopOutcome(r interopRun, softnicRole string, results []interopResult, guestOut map[string]string) string {
	guestRole := map[string]string{"server": "client", "client": "server"}[softnicRole]
	var res *interopResult
	for i := range results {
		if results[i].name == r.name+" "+softnicRole {
			res = &results[i]
		}
	}
	out, ran := guestOut[r.name+" "+guestRole]
	switch {
	case res == nil && !ran:
		return "—" // this run is one way only
	case res == nil || !ran:
		return "**fail** (one side did not run)"
	case res.err != nil || strings.Contains(out, "!! FAILED"):
		return "**fail**"
	}
	if r.rping {
		return rpingOutcome(softnicRole, res.out, out)
	}
	fig, by := toolFigure(r, out), ""
	if fig == "" {
		// read_lat's server prints nothing: softnic's client measured.
		fig, by = toolFigure(r, res.out), " (softnic's)"
	}
	if fig == "" {
		return "**fail** (no result line)"
	}
	return "pass, " + fig + by
}

// rpingOutcome counts the pings the client of an rping run printed (with
// -V each was verified).
func rpingOutcome(softnicRole, softnicOut, guestOut string) string {
	client := guestOut
	if softnicRole == "client" {
		client = softnicOut
	}
	n := len(pingDataRE.FindAllString(client, -1))
	if n == 0 {
		return "**fail** (no ping data)"
	}
	return fmt.Sprintf("pass, %d pings", n)
}

// toolFigure picks the figure of a run's output: BW average of the last
// line (MB/sec), t_typical (usec) of latency tests, t_avg of -D latency
// tests, Mbit/sec and usec/iter of pingpong.
func toolFigure(r interopRun, out string) string {
	re := r.resultRE()
	lines := re.FindAllString(out, -1)
	if len(lines) == 0 {
		return ""
	}
	last := strings.Fields(lines[len(lines)-1])
	size := ""
	if len(lines) > 1 {
		size = " at " + last[0] + " B"
	}
	switch re {
	case ppRE:
		fig := ppRE.FindStringSubmatch(out)[2] + " Mbit/s"
		if m := ppIterRE.FindStringSubmatch(out); m != nil {
			fig += ", " + m[1] + " µs/iter"
		}
		return fig
	case bwRE:
		return last[3] + " MB/s" + size
	case latDur:
		return "t_avg " + last[2] + " µs"
	}
	return "t_typical " + last[4] + " µs" + size
}

// writeInteropTableTo logs a markdown table of the runs, one row per run
// and a column per direction, and writes it to the file named by the
// environment variable env, if set.
func writeInteropTableTo(t *testing.T, env string, toServer, toClient []interopRun, results []interopResult, guestOut map[string]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| run | real tool's options | softnic client → rxe server | rxe client → softnic server |\n|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, r := range append(append([]interopRun(nil), toServer...), toClient...) {
		if seen[r.name] {
			continue
		}
		seen[r.name] = true
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", r.name, r.guestArgs(),
			interopOutcome(r, "client", results, guestOut), interopOutcome(r, "server", results, guestOut))
	}
	t.Logf("interop table:\n%s", b.String())
	if path := os.Getenv(env); path != "" {
		assert.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
}
