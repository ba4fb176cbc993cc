package isolation

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/internal/systest"

	"github.com/softnic/softnic/internal/netnstest"
	"github.com/softnic/softnic/internal/syncbuf"
	"github.com/softnic/softnic/roce"
)

// fuzzTime is how long TestLiveControlFuzzAsSecondUser fuzzes.
const fuzzTime = 30 * time.Second

// TestLiveControlFuzzAsSecondUser runs FuzzLiveControl, built with the
// fuzzer's instrumentation, as user 65533 against the live daemon of end
// A, while user 65534 runs Debian's ibv_rc_pingpong between the two ends
// through the provider, checking every buffer it receives (-c), round
// after round for the whole time and once more after. It passes when the
// fuzzer found nothing, every round finished with its data checked, and
// both daemons still serve a new session.
func TestLiveControlFuzzAsSecondUser(t *testing.T) {
	w := newWorld(t)
	netnstest.RequireCommands(t, "apt-get install ibverbs-utils iproute2", "ibv_rc_pingpong", "ss")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fuzzer := filepath.Join(w.dir, "fuzz.test")
	out, err := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-c",
		"-fuzz=^FuzzLiveControl$", "-o", fuzzer, ".").CombinedOutput()
	require.NoError(t, err, "go test -c -fuzz: %s", out)

	pp := w.newPingpong(t)
	require.NoError(t, pp.round(ctx), "user 65534's transfer before the fuzzing")
	fuzzed := make(chan struct{})
	rounds := make(chan []error, 1)
	go func() {
		var errs []error
		for {
			select {
			case <-fuzzed:
				rounds <- errs
				return
			default:
			}
			errs = append(errs, pp.round(ctx))
		}
	}()

	work := userDir(t, otherUID)
	fz := exec.CommandContext(ctx, fuzzer, "-test.run=^$", "-test.fuzz=^FuzzLiveControl$",
		"-test.fuzztime="+fuzzTime.String(), "-test.fuzzcachedir="+filepath.Join(work, "cache"), "-test.parallel=1")
	fz.Dir = work
	seen := filepath.Join(work, "seen")
	fz.Env = append(os.Environ(), fuzzSocketEnv+"="+w.a.Sock, fuzzSeenEnv+"="+seen)
	fz.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	var fout syncbuf.Buffer
	fz.Stdout, fz.Stderr = &fout, &fout
	ferr := fz.Run()
	close(fuzzed)
	errs := <-rounds

	said := fout.String()
	t.Logf("the fuzzer said:\n%s\nuser 65534's transfers meanwhile: %d", systest.Tail(said, 3), len(errs))
	crashers, _ := filepath.Glob(filepath.Join(work, "testdata", "fuzz", "FuzzLiveControl", "*"))
	for _, c := range crashers {
		data, _ := os.ReadFile(c)
		t.Logf("failing input %s:\n%s", filepath.Base(c), data)
	}
	assert.NoError(t, ferr, "the fuzzer:\n%s", systest.Tail(said, 60))
	assert.FileExists(t, seen, "the fuzzer ran no input against the live daemon")
	assert.Empty(t, crashers, "the fuzzer found failing inputs")
	for i, err := range errs {
		assert.NoError(t, err, "user 65534's transfer %d, while the fuzzer ran", i+1)
	}
	assert.NoError(t, pp.round(ctx), "user 65534's transfer after the fuzzing")
	alive(t, w.a, "after the fuzzing")
	alive(t, w.b, "after the fuzzing")
}

// pingpong runs ibv_rc_pingpong as user 65534 through the provider: the
// server on end A, the client on end B.
type pingpong struct {
	w          *world
	gidA, gidB string // the ends' IPv4 GID indices
}

// pingpongIters is one round's exchanges: about a second here.
const pingpongIters = 2000

func (w *world) newPingpong(t *testing.T) *pingpong {
	index := func(d *systest.Daemon) string {
		c, err := dialWithin(d.Sock, 10*time.Second)
		require.NoError(t, err)
		defer c.Close()
		i, err := gidIndex(c, roce.GIDFromAddr(d.End.Addr4()))
		require.NoError(t, err)
		return strconv.Itoa(i)
	}
	return &pingpong{w: w, gidA: index(w.a), gidB: index(w.b)}
}

// round runs one ping-pong of pingpongIters exchanges, each side checking
// the buffers it receives.
func (p *pingpong) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	n := strconv.Itoa(pingpongIters)
	srv := p.w.userCommand(ctx, &p.w.pair.A, attackerUID, "ibv_rc_pingpong", "-g", p.gidA, "-c", "-n", n)
	var sout syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	srv.WaitDelay = 5 * time.Second
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Process.Kill()
	var serr error
	sdone := make(chan struct{})
	go func() { serr = srv.Wait(); close(sdone) }()
	for !p.listening() {
		select {
		case <-sdone:
			return fmt.Errorf("the server ended before it listened: %v\n%s", serr, sout.String())
		case <-ctx.Done():
			return fmt.Errorf("the server never listened:\n%s", sout.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cli := p.w.userCommand(ctx, &p.w.pair.B, attackerUID, "ibv_rc_pingpong", "-g", p.gidB, "-c", "-n", n,
		p.w.pair.A.Addr4().String())
	cli.WaitDelay = 5 * time.Second
	cout, cerr := cli.CombinedOutput()
	<-sdone
	done := fmt.Sprintf("%d iters in", pingpongIters)
	if serr != nil || cerr != nil || !strings.Contains(sout.String(), done) || !strings.Contains(string(cout), done) {
		return fmt.Errorf("server %v:\n%s\nclient %v:\n%s", serr, sout.String(), cerr, cout)
	}
	return nil
}

// listening reports whether the server listens on its TCP port.
func (p *pingpong) listening() bool {
	out, _ := p.w.pair.A.Command("ss", "-Hltn", "sport = :18515").Output()
	return strings.TrimSpace(string(out)) != ""
}
