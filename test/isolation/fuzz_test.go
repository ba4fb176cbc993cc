package isolation

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	"github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/roce/memlink"
	"github.com/softnic/softnic/verbs"
)

// fuzzSocketEnv names the socket of the daemon FuzzLiveControl attacks;
// without it the target serves a device of an in-memory link itself.
// fuzzSeenEnv names a file the target creates once it has run an input
// against that daemon, which shows the fuzzing workers reached it.
const (
	fuzzSocketEnv = "SOFTNIC_FUZZ_SOCKET"
	fuzzSeenEnv   = "SOFTNIC_FUZZ_SEEN"
)

// A FuzzLiveControl input is a mode byte and messages. The mode's bit 0
// opens the connection with a proper hello (the one the client sends,
// with the descriptors its version asks for); bits 1-3 choose descriptors
// to pass (fuzzDescriptors); bits 4-7 which message carries them (15:
// every one). The messages are sent as they are, each prefixed in the
// input by its u16 little-endian length; at most fuzzMaxMessages.
const (
	fuzzHello       = 1
	fuzzEvery       = 15
	fuzzMaxMessages = 16
)

// FuzzLiveControl sends sequences of control messages, some with
// descriptors, on a fresh connection per input, to a running daemon: each
// message must get a reply, or the daemon ends the connection; after each
// input the daemon must still serve a new session. TestLiveControlFuzzAsSecondUser
// runs it as a second user against a live daemon while a first user's
// transfer goes on.
func FuzzLiveControl(f *testing.F) {
	sock, seen := os.Getenv(fuzzSocketEnv), os.Getenv(fuzzSeenEnv)
	if sock == "" {
		sock, seen = inProcessDaemon(f), ""
	}
	for _, s := range fuzzSeeds(f) {
		f.Add(s.mode, s.msgs)
	}
	f.Fuzz(func(t *testing.T, mode uint8, msgs []byte) {
		if err := playControl(sock, mode, msgs); err != nil {
			t.Fatal(err)
		}
		c, err := dialServed(sock)
		require.NoError(t, err, "the daemon stopped serving")
		c.Close()
		if seen != "" {
			os.WriteFile(seen, []byte(sock+"\n"), 0o644)
			seen = ""
		}
	})
}

// inProcessDaemon serves device A of an in-memory link pair in this
// process until the fuzzing ends, and returns its socket.
func inProcessDaemon(f *testing.F) string {
	la, lb := memlink.Pair(memlink.Config{})
	a, err := verbs.Open(la, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.1")}})
	require.NoError(f, err)
	b, err := verbs.Open(lb, verbs.Config{Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.2")}})
	require.NoError(f, err)
	sock := filepath.Join(f.TempDir(), "softnic_fuzz.sock")
	srv, err := daemon.Serve(a, daemon.Config{Socket: sock, Log: slog.New(slog.DiscardHandler)})
	require.NoError(f, err)
	f.Cleanup(func() {
		srv.Close()
		a.Close()
		b.Close()
		la.Close()
		lb.Close()
	})
	return sock
}

// dialServed opens a session, waiting out a refusal with EAGAIN: a user's
// connections that just closed may still count against its session bound.
func dialServed(sock string) (*session.Conn, error) {
	for end := time.Now().Add(10 * time.Second); ; {
		c, err := dialWithin(sock, 10*time.Second)
		if errors.Is(err, unix.EAGAIN) && time.Now().Before(end) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return c, err
	}
}

// splitMessages cuts an input's messages out of msgs.
func splitMessages(msgs []byte) [][]byte {
	var out [][]byte
	for len(msgs) >= 2 && len(out) < fuzzMaxMessages {
		n := int(binary.LittleEndian.Uint16(msgs))
		msgs = msgs[2:]
		n = min(n, len(msgs))
		out = append(out, msgs[:n])
		msgs = msgs[n:]
	}
	return out
}

// playControl runs one input on a new connection to sock. It fails only
// where the daemon did: a message it did not answer within 10 s while
// the connection stayed open.
func playControl(sock string, mode uint8, msgs []byte) error {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if mode&fuzzHello != 0 {
		ok, err := hello(conn)
		if err != nil || !ok {
			return err
		}
	}
	kind, carrier := int(mode>>1)&7, int(mode>>4)
	for i, m := range splitMessages(msgs) {
		var fds []int
		if carrier == fuzzEvery || carrier == i {
			if fds, err = fuzzDescriptors(kind, conn); err != nil {
				return err
			}
		}
		ok, err := exchange(conn, m, fds)
		closeFDs(fds)
		if err != nil || !ok {
			return err
		}
	}
	return nil
}

// hello says hello as daemon/client does; false if the daemon refused
// or ended the connection.
func hello(conn *net.UnixConn) (bool, error) {
	msg, err := hostif.Encode(make([]byte, hostif.MaxMessage), hostif.Header{Op: hostif.OpHello, Seq: 1},
		hostif.HelloRequest{Version: hostif.Version})
	if err != nil {
		return false, err
	}
	fds, err := selfMemory() // the client's address space, by descriptors it opened itself
	if err != nil {
		return false, err
	}
	defer closeFDs(fds)
	return exchange(conn, msg, fds)
}

// exchange sends msg with fds and reads the reply, closing what it
// passes; false once the daemon ended the connection.
func exchange(conn *net.UnixConn, msg []byte, fds []int) (bool, error) {
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix(msg, rights, nil); err != nil {
		return false, nil // the daemon closed the connection
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf, oob := make([]byte, hostif.MaxMessage), make([]byte, unix.CmsgSpace(16*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, c := range cmsgs {
			if got, err := unix.ParseUnixRights(&c); err == nil {
				closeFDs(got)
			}
		}
	}
	var timeout net.Error
	switch {
	case errors.As(err, &timeout) && timeout.Timeout():
		return false, fmt.Errorf("the daemon did not answer %x within 10 s", msg[:min(len(msg), 64)])
	case err != nil || n == 0:
		return false, nil
	}
	return true, nil
}

// selfMemory opens /proc/self/mem and /proc/self/maps, as a client
// passes them with hello.
func selfMemory() ([]int, error) {
	mem, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	maps, err := unix.Open("/proc/self/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mem)
		return nil, err
	}
	return []int{mem, maps}, nil
}

// fuzzDescriptors opens the descriptors of kind: 0 none, 1 a 64 KiB memfd
// sealed against shrinking, 2 a pipe's read end, 3 /dev/null, 4
// /proc/self/mem and /proc/self/maps, 5 an eventfd, 6 a sparse 64 TiB
// memfd sealed against shrinking, 7 the control socket itself.
func fuzzDescriptors(kind int, conn *net.UnixConn) ([]int, error) {
	memfd := func(size int64) ([]int, error) {
		fd, err := unix.MemfdCreate("softnic-fuzz", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			return nil, err
		}
		if err := unix.Ftruncate(fd, size); err != nil {
			unix.Close(fd)
			return nil, err
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
			unix.Close(fd)
			return nil, err
		}
		return []int{fd}, nil
	}
	switch kind {
	case 1:
		return memfd(64 << 10)
	case 2:
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return nil, err
		}
		unix.Close(p[1])
		return p[:1], nil
	case 3:
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		return []int{fd}, err
	case 4:
		return selfMemory()
	case 5:
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		return []int{fd}, err
	case 6:
		return memfd(1 << 46)
	case 7:
		raw, err := conn.SyscallConn()
		if err != nil {
			return nil, err
		}
		var fds []int
		var derr error
		raw.Control(func(fd uintptr) {
			var d int
			d, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
			fds = []int{d}
		})
		return fds, derr
	}
	return nil, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

type fuzzSeed struct {
	mode uint8
	msgs []byte
}

// fuzzSeeds are sessions as a client would run them, and as an attacker
// would: objects, memory (registered at addresses this process does not
// map, shared from memfds), completion channels, the connection manager,
// a second hello, the commands that need no hello, ops the daemon does
// not know.
func fuzzSeeds(f *testing.F) []fuzzSeed {
	buf := make([]byte, hostif.MaxMessage)
	type m struct {
		op   hostif.Op
		body any
	}
	seq := func(mode uint8, ms ...m) fuzzSeed {
		var out []byte
		for i, x := range ms {
			msg, err := hostif.Encode(buf, hostif.Header{Op: x.op, Seq: uint32(i + 2)}, x.body)
			require.NoError(f, err)
			out = binary.LittleEndian.AppendUint16(out, uint16(len(msg)))
			out = append(out, msg...)
		}
		return fuzzSeed{mode, out}
	}
	carry := func(kind, msg uint8) uint8 { return fuzzHello | kind<<1 | msg<<4 }
	qp := hostif.CreateQPRequest{PD: 1, SendCQ: 2, RecvCQ: 2, MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	return []fuzzSeed{
		seq(fuzzHello, m{hostif.OpAllocPD, hostif.Empty{}}, m{hostif.OpCreateCQ, hostif.CreateCQRequest{Entries: 16}},
			m{hostif.OpCreateQP, qp}, m{hostif.OpModifyQP, hostif.ModifyQPRequest{Handle: 3, Mask: 1, State: 1}},
			m{hostif.OpDestroyQP, hostif.HandleRequest{Handle: 3}}, m{hostif.OpDestroyCQ, hostif.HandleRequest{Handle: 2}},
			m{hostif.OpDeallocPD, hostif.HandleRequest{Handle: 1}}),
		seq(fuzzHello, m{hostif.OpAllocPD, hostif.Empty{}},
			m{hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 7, Addr: fixedAddr, Length: page}},
			m{hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 1, Addr: 1 << 12, Length: 1 << 40}},
			m{hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 0, Addr: 0x7fffffffe000, Length: page}}),
		seq(carry(1, 1), m{hostif.OpAllocPD, hostif.Empty{}}, m{hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: fixedAddr, Length: 64 << 10}},
			m{hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 7, Addr: fixedAddr, Length: 64 << 10}},
			m{hostif.OpUnshareMemory, hostif.HandleRequest{Handle: 2}}, m{hostif.OpDeregMR, hostif.HandleRequest{Handle: 3}}),
		seq(carry(6, fuzzEvery), m{hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: 1 << 40, Length: 1 << 30}},
			m{hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: 1 << 44, Length: 1 << 42}}),
		// Device memory: a region inside it, ranges that wrap or pass its
		// end, a free while the region is in it.
		seq(fuzzHello, m{hostif.OpAllocPD, hostif.Empty{}}, m{hostif.OpAllocDM, hostif.AllocDMRequest{Length: 100}},
			m{hostif.OpRegDMMR, hostif.RegDMMRRequest{PD: 1, Dm: 2, Access: 0x27, Offset: 4, Length: 96}},
			m{hostif.OpRegDMMR, hostif.RegDMMRRequest{PD: 1, Dm: 2, Access: 0x21, Offset: 1 << 63, Length: 1 << 63}},
			m{hostif.OpRegDMMR, hostif.RegDMMRRequest{PD: 1, Dm: 2, Access: 0x21, Offset: 8, Length: 96}},
			m{hostif.OpFreeDM, hostif.HandleRequest{Handle: 2}}, m{hostif.OpDeregMR, hostif.HandleRequest{Handle: 3}},
			m{hostif.OpFreeDM, hostif.HandleRequest{Handle: 2}}),
		seq(carry(2, 0), m{hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: fixedAddr, Length: page}}),
		seq(carry(7, 0), m{hostif.OpShareMemory, hostif.ShareMemoryRequest{Addr: fixedAddr, Length: page}}),
		seq(fuzzHello, m{hostif.OpCreateCompChannel, hostif.Empty{}}, m{hostif.OpCreateCompChannel, hostif.Empty{}},
			m{hostif.OpCreateCQ, hostif.CreateCQRequest{Entries: 4, Channel: 1}},
			// destroy_comp_channel: busy, then gone.
			m{hostif.OpDestroyCompChannel, hostif.HandleRequest{Handle: 1}},
			m{hostif.OpDestroyCompChannel, hostif.HandleRequest{Handle: 2}},
			m{hostif.OpDestroyCompChannel, hostif.HandleRequest{Handle: 2}}),
		seq(fuzzHello, m{hostif.OpCMCreateChannel, hostif.Empty{}},
			m{hostif.OpCMCreateID, hostif.CMCreateIDRequest{Channel: 1, PortSpace: 0x0106}},
			m{hostif.OpCMBind, hostif.CMAddrRequest{ID: 2, Port: 7000}}, m{hostif.OpCMListen, hostif.CMListenRequest{ID: 2, Backlog: 4}},
			m{hostif.OpCMGetEvent, hostif.CMGetEventRequest{Channel: 1}},
			// cm_destroy_channel while an ID uses it.
			m{hostif.OpCMDestroyChannel, hostif.HandleRequest{Handle: 1}}, m{hostif.OpCMDestroyID, hostif.HandleRequest{Handle: 2}}),
		seq(carry(4, 0), m{hostif.OpHello, hostif.HelloRequest{Version: hostif.Version}}, m{hostif.OpAllocPD, hostif.Empty{}}),
		seq(carry(4, 0)&^fuzzHello, m{hostif.OpHello, hostif.HelloRequest{Version: hostif.Version}},
			m{hostif.OpAllocPD, hostif.Empty{}}),
		seq(carry(3, 0)&^fuzzHello, m{hostif.OpHello, hostif.HelloRequest{Version: 3}}, m{hostif.OpAllocPD, hostif.Empty{}}),
		seq(0, m{hostif.OpQueryResources, hostif.ResourcesRequest{}}, m{hostif.OpQueryCounters, hostif.CountersRequest{Flags: 1, QPN: 1}},
			m{hostif.OpQueryCMIDs, hostif.CMIDsRequest{}}, m{hostif.OpAllocPD, hostif.Empty{}}),
		seq(carry(5, fuzzEvery), m{hostif.Op(999), hostif.Empty{}}, m{hostif.OpQueryPort, hostif.HandleRequest{Handle: 1}},
			m{hostif.OpQueryGID, hostif.QueryGIDRequest{Index: 1 << 31}}),
	}
}
