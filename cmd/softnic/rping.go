package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/softnic/softnic/tools/rping"
)

func init() {
	register("rping", "rdmacm-utils' rping: RDMA CM connection, then RDMA READ/WRITE ping-pong (-s server, -c client)", runRpingCmd)
}

// rping's exit statuses for bad options: EINVAL, and getaddrinfo's
// EAI_NONAME (-2) and EAI_AGAIN (-3) as a byte.
const (
	statusInvalid = 22
	statusNoName  = 254
	statusAgain   = 253
)

// printRpingUsage is rping's usage(), on stdout as rping prints it.
func printRpingUsage(w io.Writer) {
	fmt.Fprint(w, `softnic rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
softnic rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
	-c		client side
	-I		Source address to bind to for client.
	-s		server side.  To bind to any address with IPv6 use -a ::0
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size 	ping data size
	-C count	ping count times
	-a addr		address
	-p port		port
	-P		persistent server mode allowing multiple connections
	-q		use self-created, self-modified QP
softnic runs on the interface that has the address (server) or routes
to it (client); it takes no device.
softnic's own options:
	--pcap FILE	write the RoCEv2 frames sent and received to FILE (pcap)
	--pcap-size SIZE	stop capturing before FILE passes SIZE bytes (K, M, G; default 0: no limit)
	--snaplen N	keep at most N bytes of each frame (default 0: 262144, whole frames)
	--pcap-share PERCENT	most of the engine's time spent copying frames into FILE (default 5; 100: every frame)
`)
	fmt.Fprintf(w, "defaults: -S %d, -C 0 (ping until stopped), -p %d, -a the unspecified address (server), -I none,\n"+
		"-v, -V, -d, -P, -q off; --pcap none\n", rping.DefaultSize, rping.DefaultPort)
}

// rpingOptions is rping's main's option loop: options in order, each
// complaint printed where rping prints it, the first failing status kept.
type rpingOptions struct {
	cfg    rping.Config
	role   int // -1 none yet, else 1 server, 0 client
	status int
	stdout io.Writer
	stderr io.Writer
}

func parseRpingArgs(args []string, stdout, stderr io.Writer) *rpingOptions {
	o := &rpingOptions{cfg: rping.DefaultConfig(), role: -1, stdout: stdout, stderr: stderr}
	o.cfg.Stdout, o.cfg.Stderr = stdout, stderr
	g := newGetopt("a:I:Pp:C:S:t:scvVdq", args)
	for {
		opt, arg, ok := g.next()
		if !ok {
			break
		}
		if !o.option(opt, arg) {
			printRpingUsage(stdout)
			o.status = statusInvalid
			return o
		}
	}
	if o.status == 0 && o.role == -1 {
		printRpingUsage(stdout)
		o.status = statusInvalid
	}
	o.cfg.Server = o.role == 1
	return o
}

// option applies one option; it reports false for one rping does not know
// (which ends parsing with the usage).
func (o *rpingOptions) option(opt byte, arg string) bool {
	cfg := &o.cfg
	switch opt {
	case 'a':
		cfg.Addr = o.address(arg)
	case 'I':
		cfg.Source = o.address(arg)
	case 'P':
		cfg.Persistent = true
	case 'p':
		cfg.Port = uint16(atoi(arg))
		o.debugf("port %d\n", atoi(arg))
	case 's', 'c':
		o.role = map[byte]int{'s': 1, 'c': 0}[opt]
		o.debugf("%s\n", map[byte]string{'s': "server", 'c': "client"}[opt])
	case 'S':
		cfg.Size = atoi(arg)
		o.check(rping.CheckSize(cfg.Size), "size %d\n", cfg.Size)
	case 'C':
		cfg.Count = atoi(arg)
		o.check(rping.CheckCount(cfg.Count), "count %d\n", cfg.Count)
	case 'v':
		cfg.Verbose = true
		o.debugf("verbose\n")
	case 'V':
		cfg.Validate = true
		o.debugf("validate data\n")
	case 'd':
		cfg.Debug = true
	case 'q':
		cfg.SelfCreateQP = true
	default: // '?', and -t, which rping's optstring has and its switch not
		return false
	}
	return true
}

// check prints err (rping's complaint) or, with -d, the debug line.
func (o *rpingOptions) check(err error, debug string, v int) {
	if err != nil {
		fmt.Fprintln(o.stderr, err)
		o.fail(statusInvalid)
		return
	}
	o.debugf(debug, v)
}

// debugf is rping's DEBUG_LOG while parsing: it prints only once -d was
// seen, as in rping.
func (o *rpingOptions) debugf(format string, a ...any) {
	if o.cfg.Debug {
		fmt.Fprintf(o.stdout, format, a...)
	}
}

func (o *rpingOptions) fail(status int) {
	if o.status == 0 {
		o.status = status
	}
}

// address is rping's get_addr: a numeric address or a host name, the
// first address getaddrinfo would give.
func (o *rpingOptions) address(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", s)
	if err == nil && len(addrs) > 0 {
		return addrs[0].Unmap()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsTemporary {
		fmt.Fprintln(o.stdout, "getaddrinfo failed (Temporary failure in name resolution) - invalid hostname or IP address")
		o.fail(statusAgain)
	} else {
		fmt.Fprintln(o.stdout, "getaddrinfo failed (Name or service not known) - invalid hostname or IP address")
		o.fail(statusNoName)
	}
	return netip.Addr{}
}

func runRpingCmd(args []string, stdout, stderr io.Writer) int {
	args, err := capture.takeArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "softnic rping: %v\n", err)
		return statusInvalid
	}
	if wantsHelp(args) {
		printRpingUsage(stdout)
		return 0
	}
	o := parseRpingArgs(args, stdout, stderr)
	if o.status != 0 {
		return o.status
	}
	ctx, stop := signalContext()
	defer stop()
	cm, closeCM, err := openCM(o.deviceAddr())
	if err != nil {
		fmt.Fprintf(stderr, "softnic rping: %v\n", err)
		return 255
	}
	defer closeCM()
	err = rping.Run(ctx, cm, o.cfg)
	if intr := (interrupted{}); err != nil && errors.As(context.Cause(ctx), &intr) {
		return endStatus(ctx, err, stderr, "rping")
	}
	return rping.ExitStatus(err)
}

// deviceAddr is the address whose interface softnic opens: the server's
// -a (any: the default route's), the client's -I, else its -a.
func (o *rpingOptions) deviceAddr() netip.Addr {
	switch {
	case o.cfg.Server && !o.cfg.Addr.IsValid():
		return netip.IPv4Unspecified()
	case !o.cfg.Server && o.cfg.Source.IsValid():
		return o.cfg.Source
	case !o.cfg.Addr.IsValid():
		return netip.IPv4Unspecified()
	}
	return o.cfg.Addr
}
