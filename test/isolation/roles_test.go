package isolation

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/internal/systest"
)

// roleEnv names the role the test binary plays, as another user, instead
// of running tests.
const roleEnv = "SOFTNIC_ISOLATION_ROLE"

// roles read commands on stdin and say what happened on stdout, a line
// each; the test reads the lines. The tests' files add their own.
var roles = map[string]func(in *bufio.Scanner){
	"transfer": transferRole,
	"session":  sessionRole,
}

func TestMain(m *testing.M) {
	if name := os.Getenv(roleEnv); name != "" {
		run, ok := roles[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "no role %q\n", name)
			os.Exit(2)
		}
		run(bufio.NewScanner(os.Stdin))
		os.Exit(0)
	}
	systest.Main(m)
}

// errnoName is the errno a daemon's refusal carries ("EMFILE"), or "-".
func errnoName(err error) string {
	var e *session.Error
	if errors.As(err, &e) {
		return unix.ErrnoName(e.Errno)
	}
	return "-"
}

// transferRole runs `round K` commands: a transfer between the two
// daemons (SOCK_A, SOCK_B; ADDR_A, ADDR_B their ends' addresses), from A to
// B for even K and from B to A for odd K, answering "ok K" or "fail K: why".
func transferRole(in *bufio.Scanner) {
	sockA, sockB := os.Getenv("SOCK_A"), os.Getenv("SOCK_B")
	addrA, addrB := netip.MustParseAddr(os.Getenv("ADDR_A")), netip.MustParseAddr(os.Getenv("ADDR_B"))
	for in.Scan() {
		var k int
		if _, err := fmt.Sscanf(in.Text(), "round %d", &k); err != nil {
			fmt.Printf("fail: command %q\n", in.Text())
			continue
		}
		done := make(chan error, 1)
		go func() {
			if k%2 == 0 {
				done <- transfer(sockA, sockB, addrA, addrB, byte(k))
			} else {
				done <- transfer(sockB, sockA, addrB, addrA, byte(k))
			}
		}()
		select {
		case err := <-done:
			if err != nil {
				fmt.Printf("fail %d: %v\n", k, err)
			} else {
				fmt.Printf("ok %d\n", k)
			}
		case <-time.After(90 * time.Second):
			fmt.Printf("fail %d: no end within 90 s\n", k)
		}
	}
}

// sessionRole opens a session on SOCK and allocates a PD, saying "ok" or
// "fail: why". A refusal with EAGAIN or EMFILE (over the user's session or
// descriptor bound while the user's earlier sessions are still ending)
// is tried again for 20 s.
func sessionRole(*bufio.Scanner) {
	sock := os.Getenv("SOCK")
	for end := time.Now().Add(20 * time.Second); ; {
		c, err := dialWithin(sock, 10*time.Second)
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EMFILE)) && time.Now().Before(end) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			fmt.Printf("fail: %v\n", err)
			return
		}
		if _, err := c.AllocPD(); err != nil {
			fmt.Printf("fail: alloc_pd: %v\n", err)
		} else {
			fmt.Println("ok")
		}
		c.Close()
		return
	}
}
