package interop

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

// Zero-copy AF_XDP (issue #37): the mixed case (softnic in one guest,
// rdma_rxe in the other) on Debian 13 with trixie-backports' kernel,
// whose virtio-net offers AF_XDP zero-copy (6.12's does not advertise it,
// see rxeguest.TrixieBackportsKernel), once with the daemon's sockets
// bound zero-copy and once bound in copy mode. The tools reach softnic through the daemon,
// whose serving line says how the kernel bound the sockets.

// zcQueues are eth0's virtio-net queue pairs: the guest's one vCPU uses
// one, and native XDP wants another for XDP_TX.
const zcQueues = 2

// zcBindRE finds the bind mode in the daemon's serving line.
var zcBindRE = regexp.MustCompile(`msg=serving .*\bbind=("[^"]*"|\S+)`)

// zeroCopyScripts are mixedScripts with softnic's daemon started first,
// its sockets bound in mode (softnic daemon --xdp-bind), and its log
// printed once it serves (or gave up) and again at the end.
func zeroCopyScripts(steps []mixedStep, mode string) (softnicGuest, rxeGuest string) {
	sn, rx := mixedScripts(steps)
	start := "mkdir -p /run/softnic\n" +
		"softnic daemon -d eth0 --xdp-bind " + mode + " >/tmp/daemon.log 2>&1 &\n" +
		"n=0; while ! grep -q -e msg=serving -e level=ERROR /tmp/daemon.log && kill -0 $! 2>/dev/null && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done\n" +
		"echo '@@ daemon'\ncat /tmp/daemon.log\n" +
		"echo '@@ layout'\ngrep -w -e xsk_hdr -e _text /proc/kallsyms; grep -i 'kernel code' /proc/iomem\n" +
		// Without the daemon the tools would open eth0 themselves.
		"grep -q msg=serving /tmp/daemon.log || { echo '@@ kernel'; dmesg | grep -i -E 'xdp|xsk|virtio_net' | tail -n 20; exit 0; }\n" +
		zcWatch
	end := "echo '@@ stat'\ntimeout -s TERM 20 softnic stat -d eth0 2>&1\n" +
		"echo '@@ daemon log'\ncat /tmp/daemon.log\n" +
		"echo '@@ kernel'\ndmesg | grep -i -E 'xdp|xsk|virtio_net' | tail -n 20\n"
	first, rest, _ := strings.Cut(sn, "\n") // rdma link delete rxe0
	sn = first + "\n" + start + strings.Replace(rest, "echo '@@ all done'\n", end+"echo '@@ all done'\n", 1)
	return sn, rx
}

// zcWatch writes the transmit side's state to the console at the start
// and every 10 s (Result.Console, logged): the interface's and each TX
// queue's figures (BQL's bytes in flight, its limit), the softirqs and
// interrupts, and the daemon's socket counters. A run whose frames stopped
// going out says there where they stopped.
const zcWatch = "( while :; do {\n" +
	"echo \"@@watch $(cut -d' ' -f1 /proc/uptime) tx_packets $(cat /sys/class/net/eth0/statistics/tx_packets) rx_packets $(cat /sys/class/net/eth0/statistics/rx_packets)\"\n" +
	"for q in /sys/class/net/eth0/queues/tx-*; do echo \"$q inflight $(cat $q/byte_queue_limits/inflight) limit $(cat $q/byte_queue_limits/limit) timeouts $(cat $q/tx_timeout 2>/dev/null)\"; done\n" +
	"grep -E 'NET_TX|NET_RX' /proc/softirqs; grep -E 'virtio' /proc/interrupts\n" +
	"timeout -s TERM 5 softnic stat -d eth0 2>&1 | grep -o -E '(sent_pkts|rcvd_pkts|duplicate_request|tx_frames|tx_no_buffer|passes|sleeps|contended|doorbell_wakeups|link_tx_[a-z_]+|xsk_[a-z_]+) [0-9]+' | tr '\\n' ' '; echo\n" +
	"} >/dev/console 2>&1; sleep 10; done ) &\n"

// TestInteropZeroCopyGuests runs write_bw and ibv_rc_pingpong -c both ways
// between softnic's daemon in a Debian 13 guest and rdma_rxe in another,
// with the sockets bound zero-copy, in copy mode, and as the default
// (auto) binds them, and checks how the kernel bound them: --xdp-bind
// zerocopy refuses to serve without zero-copy and must say bind=zero-copy
// with a warning; auto chooses copy mode on this driver and says why
// (zeroCopyHazard in roce/xdplink). The first run fetches the
// trixie-backports kernel (about 120 MB) into the image cache.
//
// The guests boot with nokaslr: virtio_net, a module there, sends every
// zero-copy frame behind a header it DMA-maps from module memory, which
// lands on a guest physical page that KASLR picks anew at each boot. In
// 5 of about 76 zero-copy boots that page was RAM holding something else
// (0xcc padding, once): qemu then passed the header on, the host's tap
// refused every frame (EINVAL), and the driver still completed them. Without
// KASLR the page is a fixed one just past this guest's 1 GiB of RAM,
// which the device reads as zeros; checkZeroCopyHeader says where it is.
func TestInteropZeroCopyGuests(t *testing.T) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 16*time.Minute)
	defer cancel()
	img, err := rxeguest.BuildRelease(ctx, rxeguest.DefaultCacheDir(), rxeguest.TrixieBackportsKernel)
	require.NoError(t, err, "guest image")
	t.Logf("guest kernel %s", img.KernelVersion)
	bin := buildStaticSoftnic(t, ctx)
	for _, m := range []struct{ flag, bind, note string }{
		{"zerocopy", "zero-copy", "zero-copy as asked, but virtio_net is a loadable module"},
		{"copy", "copy", ""},
		{"auto", "copy", "copy mode chosen: virtio_net is a loadable module"},
	} {
		t.Run(m.flag, func(t *testing.T) { runZeroCopyGuests(t, ctx, img, bin, m.flag, m.bind, m.note) })
	}
}

// zcMemoryMiB is the softnic guest's RAM: the zero-copy header's page
// must lie past it (checkZeroCopyHeader).
const zcMemoryMiB = 1024

// zcLayoutRE reads the softnic guest's layout section: the kernel's
// virtual start, the header's virtual address in virtio_net, and the
// kernel code's physical start.
var zcLayoutRE = regexp.MustCompile(`(?s)([0-9a-f]{16}) T _text\n.*?([0-9a-f]{16}) b xsk_hdr\t\[virtio_net\].*?\n\s*([0-9a-f]+)-[0-9a-f]+ : Kernel code`)

// checkZeroCopyHeader checks that the physical address virtio_net
// translates its zero-copy header to (module memory taken for the linear
// map: the address less the kernel map's base, plus the kernel's physical
// offset) is past the guest's RAM, where the device reads zeros. A kernel
// without the static header (the bug fixed) passes.
func checkZeroCopyHeader(t *testing.T, layout string) {
	t.Helper()
	m := zcLayoutRE.FindStringSubmatch(layout)
	if m == nil {
		t.Logf("no static xsk_hdr in virtio_net's symbols: nothing to check\n%s", layout)
		return
	}
	var text, hdr, phys uint64
	for i, v := range []*uint64{&text, &hdr, &phys} {
		_, err := fmt.Sscanf(m[i+1], "%x", v)
		require.NoError(t, err)
	}
	const kernelMap = 0xffffffff80000000
	pa := hdr - kernelMap + (phys - (text - kernelMap))
	t.Logf("virtio_net's zero-copy header: virtual %#x, taken as physical %#x (%d MiB)", hdr, pa, pa>>20)
	require.GreaterOrEqualf(t, pa>>20, uint64(zcMemoryMiB), "the header's page is in the guest's RAM: the device may read a nonsense header there")
}

func runZeroCopyGuests(t *testing.T, ctx context.Context, img *rxeguest.Image, bin []byte, mode, wantBind, wantNote string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	require.NoError(t, rxeguest.SweepNetworks("snzc"))
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("snzc%d", os.Getpid()%100000),
		Taps: 2, TapQueues: zcQueues})
	require.NoError(t, err)
	defer n.Close()
	steps := mixedSteps()
	snScript, rxScript := zeroCopyScripts(steps, mode)
	boot := func(name string, tap int, addr, script string, files map[string][]byte) *rxeguest.Guest {
		g, err := rxeguest.Start(ctx, img, rxeguest.Config{Name: name, NetNS: n.BridgeNS, Tap: n.Taps[tap],
			Addr: netip.MustParsePrefix(addr + "/24"), Script: script, ScriptTimeout: 6 * time.Minute,
			MemoryMiB: zcMemoryMiB, Queues: zcQueues, AccessPlatform: true, KernelArgs: "nokaslr", Programs: files})
		require.NoError(t, err)
		return g
	}
	start := time.Now()
	snGuest := boot("zcsoftnic", 0, mixedSoftnicIP, snScript, map[string][]byte{"/usr/bin/softnic": bin})
	rxGuest := boot("zcrxe", 1, mixedRxeIP, rxScript, nil)
	snRes, snErr := snGuest.Wait()
	if snErr != nil || !strings.Contains(snRes.Output, "msg=serving") {
		cancel() // the rxe guest's clients would wait for nothing
	}
	rxRes, rxErr := rxGuest.Wait()
	t.Logf("both guests done in %v", time.Since(start).Round(time.Second))
	require.NoError(t, snErr, "softnic guest")
	snOut := guestSections(t, snRes.Output)
	t.Logf("softnic guest's daemon:\n%s\nkernel:\n%s\ncounters:\n%s", snOut["daemon"], snOut["kernel"], snOut["stat"])
	bind := zcBindRE.FindStringSubmatch(snOut["daemon"])
	require.NotNilf(t, bind, "the daemon did not serve:\n%s", snOut["daemon"])
	require.Equalf(t, wantBind, strings.Trim(bind[1], `"`), "the kernel's bind mode with --xdp-bind %s", mode)
	if wantNote != "" {
		assert.Containsf(t, snOut["daemon"], "bind_note=\""+wantNote, "the serving line's note with --xdp-bind %s", mode)
	} else {
		assert.NotContainsf(t, snOut["daemon"], "bind_note=", "the serving line with --xdp-bind %s", mode)
	}
	if wantBind == "zero-copy" {
		checkZeroCopyHeader(t, snOut["layout"])
	}
	// Both runs are on a driver that offers zero-copy: copy mode is
	// softnic's choice there, not the driver's.
	assert.Regexp(t, `driver="xdp-features [a-z,-]*xsk-zerocopy`, snOut["daemon"], "virtio-net advertises zero-copy")
	guests := []struct {
		who string
		res *rxeguest.Result
		err error
	}{{"softnic guest", snRes, snErr}, {"rxe guest", rxRes, rxErr}}
	// Both guests' output first: a stall shows on both sides.
	for _, g := range guests {
		if g.err != nil {
			continue
		}
		t.Logf("%s (status %d, %v):\n%s", g.who, g.res.ExitStatus, g.res.Duration.Round(time.Second), g.res.Output)
		if g.res.ExitStatus != 0 {
			t.Logf("%s's console:\n%s", g.who, g.res.Console)
		} else if g.who == "softnic guest" {
			t.Logf("softnic guest's transmit side (zcWatch):\n%s", tailLines(g.res.Console, 30))
		}
	}
	for _, g := range guests {
		require.NoErrorf(t, g.err, "%s", g.who)
		require.Zerof(t, g.res.ExitStatus, "%s: script failed", g.who)
	}
	rxOut := guestSections(t, rxRes.Output)
	var results []interopResult
	for _, st := range steps {
		role := " client"
		if st.softnicServes {
			role = " server"
		}
		out, ok := snOut[st.run.name+role]
		require.Truef(t, ok, "the softnic guest ran no %s%s", st.run.name, role)
		results = append(results, interopResult{name: st.run.name + role, run: st.run, out: out})
		assert.Regexpf(t, st.run.resultRE(), out, "softnic %s%s printed no result line", st.run.name, role)
	}
	require.Contains(t, snOut, "all done", "the softnic guest finished its script")
	require.Contains(t, rxOut, "all done", "the rxe guest finished its script")
	checkSameFigures(t, results, rxOut, "write_bw")
	checkPingpongs(t, results, rxOut, "pingpong-s", []string{"4096"})
}

// checkSameFigures is checkSameReport up to the spacing between the
// columns: trixie's perftest pads its message rate column otherwise than
// the perftest softnic's report follows (Debian 12's).
func checkSameFigures(t *testing.T, results []interopResult, guestOut map[string]string, name string) {
	t.Helper()
	for _, pair := range [][2]string{{name + " server", name + " client"}, {name + " client", name + " server"}} {
		mine := bwRE.FindString(resultOf(results, pair[0]))
		theirs := bwRE.FindString(guestOut[pair[1]])
		if assert.NotEmptyf(t, mine, "softnic %s printed no result line", pair[0]) {
			assert.Equalf(t, strings.Fields(theirs), strings.Fields(mine), "softnic %s, the real tool as %s", pair[0], pair[1])
		}
	}
}
