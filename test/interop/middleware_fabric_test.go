package interop

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// fabricMsgRun is fi_pingpong over libfabric's verbs msg endpoint
// (rdma_cm connections), with its data checks, the same command on both
// sides; ucxTagBwRun ucx_perftest tag_bw over UCX's rc transport (wired
// up over ud_verbs), with UCX's defaults on softnic's side.
var (
	fabricMsgRun = bareRun("fi_pingpong-msg", "fi_pingpong", "-p", "verbs", "-e", "msg", "-I", "100", "-S", "65536", "-c")
	ucxTagBwRun  = withGuestEnv(bareRun("ucx-tag_bw-rc", "env", "UCX_TLS=rc", "ucx_perftest", "-t", "tag_bw", "-s", "65536",
		"-n", "200"), rxeUCXEnv)
)

// rxeUCXEnv is what UCX 1.13 needs on rdma_rxe, whatever the peer: it
// takes a UD completion's sl as ConnectX's RoCE header type (IPv4 or
// IPv6) to find the destination GID in the 40 bytes before the payload,
// and rxe reports sl 0 (its user completions carry no header type), so
// for IPv4 GIDs UCX reads 16 bytes of the IPv4 header as the GID and
// drops every UD packet (its wire-up included) unless its check is off.
// softnic reports the type as ConnectX does and needs no such setting.
const rxeUCXEnv = "UCX_UD_VERBS_ETH_DGID_CHECK=n"

// withGuestEnv is r with env set for the guest's side only.
func withGuestEnv(r interopRun, env string) interopRun {
	r.guest = "env " + env + " " + strings.TrimPrefix(r.guest, "env ")
	return r
}

// bareRun is a stock program run as it is on both sides (interopRun.bare).
func bareRun(name string, argv ...string) interopRun {
	return interopRun{name: name, bare: true, guest: strings.Join(argv, " "), softnic: append([]string{"exec"}, argv...)}
}

// ucxFinal is ucx_perftest's last line; fabricResult fi_pingpong's.
var (
	ucxFinal     = regexp.MustCompile(`(?m)^Final:\s+200\s+.*$`)
	fabricResult = regexp.MustCompile(`(?m)^64k\s+100\s+=100\s+.*$`)
)

// TestInteropMiddleware runs fi_pingpong -e msg and ucx_perftest tag_bw
// over rc through the daemon, as nobody with CAP_IPC_LOCK, against the
// same programs on rdma_rxe, softnic either side as server; their bytes
// must show in the daemon's counters.
func TestInteropMiddleware(t *testing.T) {
	runMiddlewareInterop(t, "snmw", []interopRun{fabricMsgRun, ucxTagBwRun})
}

// runMiddlewareInterop runs each of runs (fabricMsgRun, ucxTagBwRun)
// through the daemon against the same program on rdma_rxe, softnic either
// side as server. Each program's bytes must show in the daemon's
// counters, and each side print its result.
func runMiddlewareInterop(t *testing.T, name string, runs []interopRun) {
	requireInteropHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := startInterop(t, ctx, name, interopPlan{toServer: runs, toClient: runs, scriptTimeout: 15 * time.Minute, queues: 1})
	e.startDaemon()
	e.ipcLock = true
	guestOut, _ := e.runChecked(runs, runs, 3*time.Minute, func(s runStep, res interopResult, d map[string]uint64) {
		// 64 KiB × 200 (tag_bw, one way) or × 100 each way, at most
		// 4096 bytes a packet
		min := uint64(65536 * 100 / 4096)
		if s.r.name == fabricMsgRun.name || !s.client {
			assert.GreaterOrEqualf(t, d["rcvd_pkts"], min, "%s: packets the daemon's device received: "+
				"the bytes did not go through softnic", res.name)
		}
		if s.r.name == fabricMsgRun.name || s.client {
			assert.GreaterOrEqualf(t, d["sent_pkts"], min, "%s: packets the daemon's device sent: "+
				"the bytes did not go through softnic", res.name)
		}
	})
	checkSections(t, guestOut, runs, runs)
	for _, r := range e.results {
		switch {
		case r.run.name == ucxTagBwRun.name && strings.HasSuffix(r.name, " client"):
			assert.Regexpf(t, ucxFinal, r.out, "softnic's ucx_perftest client printed no Final line")
		case r.run.name == fabricMsgRun.name:
			assert.Regexpf(t, fabricResult, r.out, "softnic's fi_pingpong %s printed no result", r.name)
		}
	}
	for _, r := range runs {
		switch r.name {
		case ucxTagBwRun.name:
			assert.Regexp(t, ucxFinal, guestOut[r.name+" client"], "the guest's ucx_perftest client printed no Final line")
		case fabricMsgRun.name:
			for _, k := range []string{r.name + " client", r.name + " server"} {
				assert.Regexpf(t, fabricResult, guestOut[k], "the guest's fi_pingpong (%s) printed no result", k)
			}
		}
	}
}
