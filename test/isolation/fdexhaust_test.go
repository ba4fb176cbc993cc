package isolation

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client/session"
)

// TestDescriptorExhaustionLeavesOthersServed: user A (65534) makes the
// daemon hold descriptors (sessions and completion channels, each channel
// a pipe the daemon keeps) until it refuses; user B (65533) keeps moving
// data between the two ends' daemons meanwhile, while A holds everything,
// and after A exited, when a new session of A is served too. A's refusal
// must be EMFILE, the errno a kernel device gives, and the daemon must
// stay up. Issue #32 saw about 20,000 channels reach the daemon's
// descriptor limit and its accept loop return, serving nobody again.
func TestDescriptorExhaustionLeavesOthersServed(t *testing.T) {
	w := newWorld(t)
	b := w.startRole(t, "transfer", otherUID, w.transferEnv()...)
	require.NoError(t, b.round(0), "user B's transfer before the attack")

	a := w.startRole(t, "fdhog", attackerUID, "SOCK="+w.a.Sock)
	// B's transfers while A works: each must succeed, however many fit.
	stop := make(chan struct{})
	var during []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			during = append(during, b.round(k))
		}
	}()
	var said []string
	for {
		l := a.next(t, 5*time.Minute)
		said = append(said, l)
		if regexp.MustCompile(`^holding `).MatchString(l) {
			break
		}
	}
	close(stop)
	wg.Wait()
	// What B's last sessions freed, A takes again.
	a.send(t, "top up")
	for {
		l := a.next(t, 5*time.Minute)
		said = append(said, l)
		if regexp.MustCompile(`^holding `).MatchString(l) {
			break
		}
	}
	t.Logf("user A: %q; user B's transfers meanwhile: %d", said, len(during))
	for i, err := range during {
		assert.NoError(t, err, "user B's transfer %d, while A took descriptors", i+1)
	}
	// The first refusal A met is the daemon's word on its limit.
	refusal := regexp.MustCompile(`^session (\d+) (?:channels (\d+) )?refused: .* errno=(\S+)$`)
	var first []string
	for _, l := range said {
		if m := refusal.FindStringSubmatch(l); m != nil {
			first = m
			break
		}
	}
	if assert.NotNil(t, first, "the daemon never refused user A: %q", said) {
		assert.Equal(t, "EMFILE", first[3], "user A's refusal: %s", first[0])
	}

	assert.NoError(t, b.round(1000), "user B's transfer while A holds its descriptors")
	alive(t, w.a, "while user A holds its descriptors")
	a.exit(t)
	assert.NoError(t, b.round(1001), "user B's transfer after A exited")
	again := w.startRole(t, "session", attackerUID, "SOCK="+w.a.Sock)
	assert.Equal(t, "ok", again.next(t, time.Minute), "a new session of user A after A exited")
	alive(t, w.a, "at the end")
}

func init() { roles["fdhog"] = fdHogRole }

// fdHogRole makes the daemon on SOCK hold descriptors for it: sessions,
// each with completion channels (the daemon keeps each channel's pipe)
// until the daemon refuses one, closing its own end of each at once so
// that its own descriptor limit is not what stops it, then CQs until
// refused; it says, per session, "session N channels M refused: ERR
// errno=E" and "session N cqs K refused: ...", then "holding sessions=S
// channels=C". On "top up" it fills again what was freed meanwhile (by
// other users' sessions ending), from its last session on, and says
// "holding ..." again; it holds all until its stdin closes.
func fdHogRole(in *bufio.Scanner) {
	sock := os.Getenv("SOCK")
	var conns []*session.Conn
	total := 0
	fill := func(c *session.Conn, s int) int {
		n := 0
		for {
			ch, err := c.CreateCompChannel()
			if err != nil {
				fmt.Printf("session %d channels %d refused: %v errno=%s\n", s, n, err, errnoName(err))
				break
			}
			ch.File.Close()
			n++
		}
		// The last descriptor a channel's pipe could not take, a CQ's may.
		k := 0
		for {
			if _, err := c.CreateCQ(1, nil, 0); err != nil {
				fmt.Printf("session %d cqs %d refused: %v errno=%s\n", s, k, err, errnoName(err))
				break
			}
			k++
		}
		total += n
		return n
	}
	hog := func() {
		if len(conns) > 0 {
			fill(conns[len(conns)-1], len(conns))
		}
		for len(conns) < 16 {
			c, err := dialWithin(sock, 10*time.Second)
			if err != nil {
				fmt.Printf("session %d refused: %v errno=%s\n", len(conns)+1, err, errnoName(err))
				break
			}
			conns = append(conns, c)
			if fill(c, len(conns)) == 0 {
				break
			}
		}
		fmt.Printf("holding sessions=%d channels=%d\n", len(conns), total)
	}
	hog()
	for in.Scan() {
		if in.Text() == "top up" {
			hog()
		}
	}
	for _, c := range conns {
		c.Close()
	}
}
