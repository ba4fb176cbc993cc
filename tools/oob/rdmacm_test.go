package oob

import (
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chanMessenger is one end of an in-memory message link that, like the
// -R exchange QP, keeps message boundaries: a receive of the wrong length
// fails. It records the sizes this end sent.
type chanMessenger struct {
	in, out chan []byte
	mu      sync.Mutex
	sent    []int
}

func chanPair() (*chanMessenger, *chanMessenger) {
	a, b := make(chan []byte, 4), make(chan []byte, 4)
	return &chanMessenger{in: a, out: b}, &chanMessenger{in: b, out: a}
}

func (c *chanMessenger) Send(what string, msg []byte, timeout time.Duration) error {
	c.mu.Lock()
	c.sent = append(c.sent, len(msg))
	c.mu.Unlock()
	select {
	case c.out <- append([]byte(nil), msg...):
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("send %s: timeout", what)
	}
}

func (c *chanMessenger) Recv(what string, buf []byte, timeout time.Duration) error {
	select {
	case m := <-c.in:
		if len(m) != len(buf) {
			return fmt.Errorf("%w: %s is %d bytes, want %d", ErrMessageLength, what, len(m), len(buf))
		}
		copy(buf, m)
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("receive %s: timeout", what)
	}
}

// Golden binary keys: struct pingpong_dest (perftest v4.5-0.17
// src/perftest_resources.h line 221) as rdma_write_keys fills it
// (perftest_communication.c line 431, htobe32/htobe64 of each field): the
// values of goldenKeys, gid_index 3, zero padding.
const goldenBinaryKeys = "00000000" + "00000001" + "00000011" + "007f1a4b" + "00001234" + "00000000" +
	"00007f8ab7f41000" + "00000000000000000000ffff0a000001" + "00000000" + "00000003"

func TestBinaryKeysGolden(t *testing.T) {
	d := PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0x7f1a4b, RKey: 0x1234, VAddr: 0x7f8ab7f41000, GID: testGID}
	b := d.FormatBinary(3)
	require.Equal(t, goldenBinaryKeys, hex.EncodeToString(b))
	got, err := ParseBinaryDest(b)
	require.NoError(t, err)
	require.Equal(t, d, got)

	_, err = ParseBinaryDest(b[:55])
	require.ErrorIs(t, err, ErrMessageLength)
	b[binQPN] = 1 // QPN 0x01000011: wider than 24 bits
	_, err = ParseBinaryDest(b)
	require.ErrorIs(t, err, ErrFieldRange)
}

// TestRDMACMSequence runs write_bw and send_bw over message links: the
// messages are those of the Ethernet exchange with 56-byte binary keys and
// no "done", and each side sees the other's keys.
func TestRDMACMSequence(t *testing.T) {
	setup := []int{16, 4, 4, 2}
	k := KeysBinLen
	rep := []int{8, 8, 8, 8, 8}
	for _, tc := range []struct {
		test Test
		want []int // what each side sends
	}{
		{WriteBW, append(append(append(setup, k, k, k, k), rep...), k)},
		{SendBW, append(setup, k, k, k, k, k)},
	} {
		cm, sm := chanPair()
		local := func(qpn uint32) []PerftestDest { return []PerftestDest{{QPN: qpn, PSN: 7, GID: testGID}} }
		var cRemote, sRemote []PerftestDest
		hooks := func(remote *[]PerftestDest) Hooks {
			return Hooks{Connect: func(r []PerftestDest) error { *remote = r; return nil }}
		}
		var wg sync.WaitGroup
		var serr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := NewRDMACMSession(sm, Server, time.Second, 1)
			if _, serr = s.Setup(PerftestVersion, SysData{4096, 64}, 5); serr == nil {
				_, serr = s.Run(tc.test, local(0x22), 1, hooks(&sRemote))
			}
		}()
		c := NewRDMACMSession(cm, Client, time.Second, 1)
		_, err := c.Setup(PerftestVersion, SysData{4096, 64}, 5)
		if err == nil {
			_, err = c.Run(tc.test, local(0x11), 1, hooks(&cRemote))
		}
		wg.Wait()
		require.NoError(t, err, "%v client", tc.test)
		require.NoError(t, serr, "%v server", tc.test)
		assert.Equal(t, tc.want, cm.sent, "%v: client sent", tc.test)
		assert.Equal(t, tc.want, sm.sent, "%v: server sent", tc.test)
		assert.Equal(t, local(0x22), cRemote, "%v: client's view of the server", tc.test)
		assert.Equal(t, local(0x11), sRemote, "%v: server's view of the client", tc.test)
	}
}
