// Command rxecapture records RoCEv2 traffic between two Linux rdma_rxe
// peers: it boots two qemu guests on a bridge in a private network
// namespace, runs a server and a client tool (ibv_rc_pingpong, perftest,
// rping, ...) and captures the bridge with tcpdump, one pcap per scenario.
// The pcaps under roce/testdata were made with it; it needs root, qemu,
// tcpdump and apt (see test/interop/install-deps.sh).
//
//	go run ./test/interop/cmd/rxecapture -out roce/testdata [-only rxe-rc-pingpong]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/softnic/softnic/test/interop/rxeguest"
)

const (
	serverIP = "10.77.0.11"
	clientIP = "10.77.0.12"
)

// scenario is one capture: a server and a client script run in two guests.
type scenario struct {
	name   string
	about  string
	server string
	client string
	filter string // tcpdump filter; RoCEv2 only unless set
	// netem on the client's / server's eth0, for loss and reordering.
	clientNetem, serverNetem string
}

// retryConnect runs a client tool again while the server is not listening
// yet (the guests boot concurrently); any other failure is final.
const retryConnect = `
retry() {
	i=0
	while :; do
		# (an if keeps set -e from ending the script on the failed attempt)
		if out=$("$@" 2>&1); then rc=0; else rc=$?; fi
		if [ $rc -ne 0 ] && [ $i -lt 100 ] && echo "$out" | grep -qiE "couldn't connect|unable to connect|REJECTED|connection refused|Unexpected CM event"; then
			i=$((i + 1)); sleep 0.3; continue
		fi
		echo "$out"; return $rc
	done
}
`

// perftest runs tool with each size in turn on the server and the client.
func perftest(name, about, tool, flags string, sizes ...string) scenario {
	s := scenario{name: name, about: about, server: "set -e\n", client: retryConnect + "set -e\n"}
	for _, size := range sizes {
		common := fmt.Sprintf("%s -d rxe0 -x 1 -m 1024 -s %s %s", tool, size, flags)
		s.server += common + "\n"
		s.client += "retry " + common + " " + serverIP + "\n"
	}
	return s
}

var scenarios = []scenario{
	{
		name:   "rxe-rc-pingpong",
		about:  "ibv_rc_pingpong -g 1 -m 1024 -s 2500 -n 2, then -s 100 -n 2: RC SEND first/middle/last and only, ACKs",
		server: "set -e\nibv_rc_pingpong -d rxe0 -g 1 -m 1024 -s 2500 -n 2\nibv_rc_pingpong -d rxe0 -g 1 -m 1024 -s 100 -n 2\n",
		client: retryConnect + "set -e\nretry ibv_rc_pingpong -d rxe0 -g 1 -m 1024 -s 2500 -n 2 " + serverIP +
			"\nretry ibv_rc_pingpong -d rxe0 -g 1 -m 1024 -s 100 -n 2 " + serverIP + "\n",
	},
	{
		name:   "rxe-ud-pingpong",
		about:  "ibv_ud_pingpong -g 1 -s 512 -n 2: UD SEND only with DETH",
		server: "ibv_ud_pingpong -d rxe0 -g 1 -s 512 -n 2\n",
		client: retryConnect + "retry ibv_ud_pingpong -d rxe0 -g 1 -s 512 -n 2 " + serverIP + "\n",
	},
	perftest("rxe-write", "ib_write_bw -n 5 -m 1024 with -s 2500 and -s 64: RDMA WRITE first/middle/last and only, ACKs",
		"ib_write_bw", "-n 5", "2500", "64"),
	perftest("rxe-read", "ib_read_bw -n 5 -m 1024 with -s 2500 and -s 64: READ request, READ response first/middle/last and only",
		"ib_read_bw", "-n 5", "2500", "64"),
	perftest("rxe-send", "ib_send_bw -n 5 -m 1024 with -s 2500 and -s 64: SEND first/middle/last and only, ACKs",
		"ib_send_bw", "-n 5", "2500", "64"),
	perftest("rxe-atomic-fadd", "ib_atomic_bw -n 5 -A FETCH_AND_ADD: fetch-and-add requests and atomic ACKs",
		"ib_atomic_bw", "-n 5 -A FETCH_AND_ADD", "8"),
	{
		name:   "rxe-atomic-cas",
		about:  "ib_atomic_bw -n 5 -A CMP_AND_SWAP: compare-and-swap requests and atomic ACKs",
		server: "ib_atomic_bw -d rxe0 -x 1 -n 5 -A CMP_AND_SWAP\n",
		client: retryConnect + "retry ib_atomic_bw -d rxe0 -x 1 -n 5 -A CMP_AND_SWAP " + serverIP + "\n",
	},
	{
		name:        "rxe-write-loss",
		about:       "ib_write_bw -s 4000 -n 8 -m 1024 with netem loss 10% on the client: NAK (PSN sequence error) and retransmissions",
		server:      "ib_write_bw -d rxe0 -x 1 -m 1024 -s 4000 -n 8\n",
		client:      retryConnect + "retry ib_write_bw -d rxe0 -x 1 -m 1024 -s 4000 -n 8 " + serverIP + "\n",
		clientNetem: "loss 10%",
	},
	{
		name:        "rxe-send-reorder",
		about:       "ib_send_bw -s 4000 -n 5 -m 1024 with netem delay 4ms reorder 50% 50% on the client: out-of-order SENDs, NAK (PSN sequence error), retransmissions",
		server:      "ib_send_bw -d rxe0 -x 1 -m 1024 -s 4000 -n 5\n",
		client:      retryConnect + "retry ib_send_bw -d rxe0 -x 1 -m 1024 -s 4000 -n 5 " + serverIP + "\n",
		clientNetem: "delay 4ms reorder 50% 50%",
	},
	{
		name:        "rxe-read-loss",
		about:       "ib_read_bw -s 3000 -n 8 -m 1024 with netem loss 10% on the server: lost READ responses, re-issued READ requests",
		server:      "ib_read_bw -d rxe0 -x 1 -m 1024 -s 3000 -n 8\n",
		client:      retryConnect + "retry ib_read_bw -d rxe0 -x 1 -m 1024 -s 3000 -n 8 " + serverIP + "\n",
		serverNetem: "loss 10%",
	},
	{
		name:   "rxe-rping",
		about:  "rping -C 2 -S 64: RDMA CM MADs (REQ/REP/RTU, DREQ/DREP) on QP1, SEND, READ and WRITE",
		server: "rping -s -a " + serverIP + " -C 2 -S 64 -v\n",
		client: retryConnect + "retry rping -c -a " + serverIP + " -C 2 -S 64 -v\n",
	},
	{
		name:  "rxe-cm-reject",
		about: "rping -c to port 7199, where nothing listens: REQ and the CM's REJ, reason 8 (invalid service ID)",
		// The server guest only has to be up: its kernel's CM answers. The
		// client waits for that (a REQ before it goes unanswered).
		server: "sleep 25\n",
		client: "sleep 8\nrping -c -a " + serverIP + " -p 7199 -C 1 -v || true\n",
	},
	{
		name:   "rxe-write-bw-rdmacm",
		about:  "ib_write_bw -R -s 2500 -n 5: perftest connecting with RDMA CM, its exchange as SENDs on a CM-connected QP",
		server: "ib_write_bw -d rxe0 -R -m 1024 -s 2500 -n 5\n",
		client: retryConnect + "retry ib_write_bw -d rxe0 -R -m 1024 -s 2500 -n 5 " + serverIP + "\n",
	},
}

func main() {
	out := flag.String("out", "roce/testdata", "directory for the pcaps")
	only := flag.String("only", "", "comma-separated scenario names (default: all)")
	cache := flag.String("cache", rxeguest.DefaultCacheDir(), "guest image cache directory")
	list := flag.Bool("list", false, "list scenarios and exit")
	flag.DurationVar(&scenarioTimeout, "timeout", scenarioTimeout, "time limit per scenario")
	flag.Parse()
	if *list {
		for _, s := range scenarios {
			fmt.Printf("%-20s %s\n", s.name, s.about)
		}
		return
	}
	if os.Geteuid() != 0 {
		log.Fatal("rxecapture needs root (network namespaces, tap devices, tcpdump)")
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		if n != "" {
			want[n] = true
		}
	}
	ctx := context.Background()
	img, err := rxeguest.Build(ctx, *cache)
	if err != nil {
		log.Fatal(err)
	}
	failed := false
	for _, s := range scenarios {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		if err := capture(ctx, img, s, *out); err != nil {
			log.Printf("%s: %v", s.name, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

var scenarioTimeout = 2 * time.Minute

func capture(ctx context.Context, img *rxeguest.Image, s scenario, outDir string) error {
	ctx, cancel := context.WithTimeout(ctx, scenarioTimeout)
	defer cancel()
	if err := rxeguest.SweepNetworks("rxecap"); err != nil {
		return err
	}
	n, err := rxeguest.NewNetwork(ctx, rxeguest.NetworkConfig{Name: fmt.Sprintf("rxecap%d", os.Getpid()), Taps: 2})
	if err != nil {
		return err
	}
	defer n.Close()
	file, err := filepath.Abs(filepath.Join(outDir, s.name+".pcap"))
	if err != nil {
		return err
	}
	filter := s.filter
	if filter == "" {
		filter = "udp port 4791"
	}
	c, err := n.Capture(ctx, n.Bridge, file, filter)
	if err != nil {
		return err
	}
	server, err := startGuest(ctx, img, n, "server", 0, serverIP, s.server, s.serverNetem)
	if err != nil {
		c.Stop()
		return err
	}
	client, err := startGuest(ctx, img, n, "client", 1, clientIP, s.client, s.clientNetem)
	if err != nil {
		cancel()
		server.Wait()
		c.Stop()
		return err
	}
	cres, cerr := client.Wait()
	sres, serr := server.Wait()
	stopErr := c.Stop()
	for _, r := range []struct {
		who string
		res *rxeguest.Result
		err error
	}{{"client", cres, cerr}, {"server", sres, serr}} {
		if r.err != nil {
			if r.res != nil {
				log.Printf("%s %s output:\n%s", s.name, r.who, r.res.Output)
			}
			return fmt.Errorf("%s: %w", r.who, r.err)
		}
		log.Printf("%s %s: exit %d after %v\n%s", s.name, r.who, r.res.ExitStatus, r.res.Duration.Round(time.Millisecond), r.res.Output)
		if r.res.ExitStatus != 0 {
			return fmt.Errorf("%s script failed with status %d", r.who, r.res.ExitStatus)
		}
	}
	if stopErr != nil {
		return stopErr
	}
	log.Printf("%s: wrote %s", s.name, file)
	return nil
}

// startGuest starts one of a scenario's two guests on tap number tap of n.
func startGuest(ctx context.Context, img *rxeguest.Image, n *rxeguest.Network, name string, tap int, ip, script, netem string) (*rxeguest.Guest, error) {
	return rxeguest.Start(ctx, img, rxeguest.Config{
		Name: name, Script: script, NetNS: n.BridgeNS, Tap: n.Taps[tap],
		Addr: netip.MustParsePrefix(ip + "/24"), Netem: netem,
		ScriptTimeout: scenarioTimeout - 30*time.Second,
	})
}
