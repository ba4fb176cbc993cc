package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/rdmacm"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// useMemCM makes openCM return, for any address, a CM over two softnic
// devices joined by an in-memory link: A (10.0.0.1) and B (10.0.0.2),
// each routing to the other. It returns a function that waits until n
// IDs are open on A (the server listens).
func useMemCM(t *testing.T) (listening func()) {
	t.Helper()
	la, lb := memlink.Pair(memlink.Config{})
	a4, b4 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	da, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{a4}})
	require.NoError(t, err)
	db, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{b4}})
	require.NoError(t, err)
	var mu sync.Mutex
	var cms []*rdmacm.CM
	saved := openCM
	openCM = func(netip.Addr) (*rdmacm.CM, func(), error) {
		c, err := rdmacm.New(rdmacm.Config{Devices: []*verbs.Device{da, db},
			Route: func(dst netip.Addr) (netip.Addr, error) {
				if dst == a4 {
					return b4, nil
				}
				return a4, nil
			}})
		if err != nil {
			return nil, nil, err
		}
		mu.Lock()
		cms = append(cms, c)
		mu.Unlock()
		return c, func() { c.Close() }, nil
	}
	t.Cleanup(func() {
		openCM = saved
		da.Close()
		db.Close()
		la.Close()
		lb.Close()
	})
	return func() {
		for i := 0; ; i++ {
			mu.Lock()
			n := 0
			for _, c := range cms {
				n += c.IDs()
			}
			mu.Unlock()
			if n > 0 {
				return
			}
			require.Less(t, i, 2000, "the server did not listen")
			time.Sleep(time.Millisecond)
		}
	}
}

// rpingRun is one softnic rping's status and output.
type rpingRun struct {
	status         int
	stdout, stderr string
}

func (r rpingRun) String() string {
	return fmt.Sprintf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
}

func runRping(args ...string) rpingRun {
	var o, e bytes.Buffer
	status := run(append([]string{"rping"}, args...), &o, &e)
	return rpingRun{status, o.String(), e.String()}
}

// rpingPair runs a server, waits until it listens, runs the client, and
// waits for the server.
func rpingPair(t *testing.T, server, client []string) (srv, cli rpingRun) {
	t.Helper()
	listening := useMemCM(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv = runRping(server...)
	}()
	listening()
	cli = runRping(client...)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the server did not end; client:\n%v", cli)
	}
	return srv, cli
}

// TestRpingClientServer runs softnic rping -s and -c -C 100 -v -V at
// several sizes (rping's options grouped and apart): rping's lines, its
// ends, status 0.
func TestRpingClientServer(t *testing.T) {
	for _, size := range []string{"26", "64", "1500", "65535"} {
		t.Run(size, func(t *testing.T) {
			srv, cli := rpingPair(t, []string{"-s", "-v", "-a", "10.0.0.1", "-S", size},
				[]string{"-c", "-vV", "-a10.0.0.1", "-C", "100", "-S" + size})
			require.Zero(t, cli.status, "client:\n%v\nserver:\n%v", cli, srv)
			require.Zero(t, srv.status, "server:\n%v", srv)
			lines := strings.Split(strings.TrimSuffix(cli.stdout, "\n"), "\n")
			require.Len(t, lines, 100, cli.stdout)
			assert.Regexp(t, `^ping data: rdma-ping-0: ABCDEFGHIJKL`, lines[0])
			assert.Regexp(t, `^ping data: rdma-ping-99: `, lines[99])
			for _, l := range lines {
				assert.Len(t, l, len("ping data: ")+atoi(size)-1)
			}
			assert.Equal(t, "client DISCONNECT EVENT...\n", cli.stderr)
			assert.Equal(t, 100, strings.Count(srv.stdout, "server ping data: rdma-ping-"))
			assert.Equal(t, "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n", srv.stderr)
		})
	}
	// rping's first line, byte for byte.
	t.Run("first line", func(t *testing.T) {
		_, cli := rpingPair(t, []string{"-s", "-a", "10.0.0.1"}, []string{"-c", "-v", "-a", "10.0.0.1", "-C", "1"})
		assert.Equal(t, "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\n", cli.stdout)
	})
}

// TestRpingAnyAddress: a server without -a listens on every address, and
// a client with -I binds its source.
func TestRpingAnyAddress(t *testing.T) {
	srv, cli := rpingPair(t, []string{"-s", "-p", "7200"}, []string{"-c", "-I", "10.0.0.2", "-a", "10.0.0.1", "-p", "7200", "-C", "10", "-V"})
	require.Zero(t, cli.status, "client:\n%v\nserver:\n%v", cli, srv)
	require.Zero(t, srv.status, "server:\n%v", srv)
	assert.Empty(t, cli.stdout)
}

// TestRpingRefused: nobody listens on the port. The client says so as
// rping does and fails with 255, in under a second.
func TestRpingRefused(t *testing.T) {
	useMemCM(t)
	began := time.Now()
	cli := runRping("-c", "-a", "10.0.0.1", "-C", "3")
	assert.Less(t, time.Since(began), time.Second)
	assert.Equal(t, 255, cli.status, "%v", cli)
	assert.Equal(t, "cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n", cli.stderr)
}

// TestRpingDebug: -d prints rping's debug lines, from the options on.
func TestRpingDebug(t *testing.T) {
	srv, cli := rpingPair(t, []string{"-d", "-s", "-a", "10.0.0.1"}, []string{"-d", "-c", "-a", "10.0.0.1", "-C", "2"})
	require.Zero(t, cli.status, "client:\n%v", cli)
	for _, want := range []string{"client\n", "count 2\n", "cma_event type RDMA_CM_EVENT_ADDR_RESOLVED cma_id ",
		"cma_event type RDMA_CM_EVENT_ROUTE_RESOLVED cma_id ", "rdma_resolve_addr - rdma_resolve_route successful\n",
		"ESTABLISHED\n", "rdma_connect successful\n", "RDMA addr ", "recv completion\n", "send completion\n"} {
		assert.Contains(t, cli.stdout, want)
	}
	for _, want := range []string{"server\n", "rdma_bind_addr successful\n", "rdma_listen\n",
		"cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id ", "accepting client connection request\n",
		"Received rkey ", "server posted rdma read req \n", "rdma read completion\n", "rdma write from lkey ",
		"server rdma write complete \n", "server posted go ahead\n"} {
		assert.Contains(t, srv.stdout, want)
	}
	assert.Regexp(t, `(?m)^cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id 0x[0-9a-f]+ \(child\)$`, srv.stdout)
}

// TestRpingBadUsage checks rping's answers to bad command lines: its
// usage on stdout and status 22 (EINVAL), its size and count messages,
// getaddrinfo's complaint and status.
func TestRpingBadUsage(t *testing.T) {
	useMemCM(t)
	for _, c := range []struct {
		args           []string
		status         int
		stdout, stderr string
	}{
		{nil, 22, "softnic rping -s [-vVd]", ""},
		{[]string{"-x"}, 22, "softnic rping -c [-vVd]", ""},
		{[]string{"-c", "-a"}, 22, "\t-P\t\tpersistent server mode", ""},
		{[]string{"-s", "-t", "1"}, 22, "usage", ""},
		{[]string{"-c", "-S", "25"}, 22, "", "Invalid size 25 (valid range is 26 to 65536)\n"},
		{[]string{"-c", "-S", "65536"}, 22, "", "Invalid size 65536 (valid range is 26 to 65536)\n"},
		{[]string{"-c", "-C", "-1"}, 22, "", "Invalid count -1\n"},
	} {
		r := runRping(c.args...)
		assert.Equal(t, c.status, r.status, "%q: %v", c.args, r)
		if c.stdout == "usage" {
			assert.Contains(t, r.stdout, "softnic rping -s [-vVd]", "%q", c.args)
		} else if c.stdout != "" {
			assert.Contains(t, r.stdout, c.stdout, "%q", c.args)
		}
		assert.Equal(t, c.stderr, r.stderr, "%q", c.args)
	}
	// A name that does not resolve: EAI_NONAME (254), or EAI_AGAIN (253)
	// where no DNS server answers.
	r := runRping("-c", "-a", "no.such.host.invalid")
	assert.Regexp(t, `^getaddrinfo failed \((Name or service not known|Temporary failure in name resolution)\) - invalid hostname or IP address\n$`, r.stdout)
	assert.Contains(t, []int{253, 254}, r.status, "%v", r)
}
