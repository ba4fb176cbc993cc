package daemon_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	hostsession "github.com/softnic/softnic/daemon/client/session"
	"github.com/softnic/softnic/hostif"
	"github.com/softnic/softnic/ibtransport/ibv"
)

// A TM SRQ's list counts against the user's TMTags by its size; bad list
// operations and sizes are refused with an errno and change nothing; the
// SRQ's CQ is not destroyed under it; the session's end gives all back.
func TestTMSRQLimitsAndBadOps(t *testing.T) {
	uid := uint32(os.Geteuid())
	r := newRigLimited(t, daemon.Limits{TMTags: 8})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	pd, err := c.AllocPD()
	require.NoError(t, err)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)

	_, err = c.CreateTMSRQ(pd, 16, 1, cq.Handle, hostif.TMMaxNumTags+1, 4, 0)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "more tags than the device lists")
	_, err = c.CreateTMSRQ(pd, 16, 1, cq.Handle, 4, 0, 0)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "no operations")
	_, err = c.CreateTMSRQ(pd, 16, 1, cq.Handle+100, 4, 4, 0)
	require.Equal(t, unix.ENOENT, errnoOf(t, err), "no such CQ")
	_, err = c.CreateTMSRQ(pd, 16, 1, cq.Handle, 9, 4, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "9 tags over a bound of 8")
	srq, err := c.CreateTMSRQ(pd, 16, 1, cq.Handle, 8, 4, 0)
	require.NoError(t, err)
	require.Equal(t, 8, r.srv.Usage(uid).TMTags)
	require.Equal(t, unix.EBUSY, errnoOf(t, cq.Destroy()), "the TM SRQ's CQ")

	sge := []ibv.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}
	_, err = srq.PostOp(&ibv.OpsWR{Opcode: 7})
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "an unknown opcode")
	_, err = srq.PostOp(&ibv.OpsWR{Opcode: ibv.OpsTagAdd, Flags: 0x80, SGL: sge})
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "an unknown flag")
	_, err = srq.PostOp(&ibv.OpsWR{Opcode: ibv.OpsTagAdd, SGL: append(sge, sge...)})
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "two SGEs")
	_, err = srq.PostOp(&ibv.OpsWR{Opcode: ibv.OpsTagDel, Handle: 0xffff})
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "a handle past the list")
	for i := range 8 {
		h, err := srq.PostOp(&ibv.OpsWR{Opcode: ibv.OpsTagAdd, Tag: uint64(i), Mask: ^uint64(0), SGL: sge})
		require.NoError(t, err)
		require.NotZero(t, h)
	}
	_, err = srq.PostOp(&ibv.OpsWR{Opcode: ibv.OpsTagAdd, SGL: sge})
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "the list is full")

	// An ordinary SRQ takes no list operations.
	plain, err := c.CreateSRQ(pd, 16, 1, 0, 0)
	require.NoError(t, err)
	_, err = plain.PostOp(&ibv.OpsWR{Opcode: ibv.OpsTagSync})
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "a basic SRQ")

	require.NoError(t, srq.Destroy())
	require.Zero(t, r.srv.Usage(uid).TMTags)
	srq, err = c.CreateTMSRQ(pd, 16, 1, cq.Handle, 8, 4, 0)
	require.NoError(t, err, "the bound gave the tags back")
	c.Close()
	require.Eventually(t, func() bool { return r.srv.Usage(uid) == daemon.Usage{} }, 10*time.Second, 10*time.Millisecond,
		"all given back: %+v", r.srv.Usage(uid))
}
