package daemon_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/daemon"
	hostsession "github.com/softnic/softnic/daemon/client/session"
)

// TestXRCDs opens XRC domains through the host interface: two sessions
// that pass the same file share one domain (a receive QP one makes the
// other opens), a private domain does not know it, the user's XRCD bound
// refuses one more (ENOMEM), close_xrcd is EBUSY while a QP of the handle
// remains, and a session's end gives its handles back.
func TestXRCDs(t *testing.T) {
	uid := uint32(os.Geteuid())
	r := newRigLimited(t, daemon.Limits{XRCDs: 3})
	c, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	other, err := hostsession.Dial(r.socket)
	require.NoError(t, err)
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "domain"), os.O_RDONLY|os.O_CREATE, 0o400)
	require.NoError(t, err)
	defer f.Close()

	_, err = c.OpenXRCD(int(f.Fd()), 0)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "no domain on the file and no O_CREAT")
	fds := r.srv.Usage(uid).Descriptors
	x1, err := c.OpenXRCD(int(f.Fd()), unix.O_CREAT)
	require.NoError(t, err)
	require.Equal(t, fds+1, r.srv.Usage(uid).Descriptors, "the domain keeps its file open: one of the user's descriptors")
	_, err = other.OpenXRCD(int(f.Fd()), unix.O_CREAT|unix.O_EXCL)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "O_EXCL on a file with a domain")
	x2, err := other.OpenXRCD(int(f.Fd()), 0)
	require.NoError(t, err)
	private, err := other.OpenXRCD(-1, 0)
	require.NoError(t, err)
	_, err = other.OpenXRCD(-1, 0)
	require.Equal(t, unix.ENOMEM, errnoOf(t, err), "XRCDs over both sessions")

	qp, err := c.CreateXRCQP(x1, 1)
	require.NoError(t, err)
	opened, err := other.OpenQP(x2, qp.QPN, 2)
	require.NoError(t, err)
	require.Equal(t, qp.QPN, opened.QPN)
	_, err = other.OpenQP(private, qp.QPN, 3)
	require.Equal(t, unix.EINVAL, errnoOf(t, err), "a private domain has no such QP")
	require.Equal(t, unix.EBUSY, errnoOf(t, c.CloseXRCD(x1)), "a QP of the handle remains")
	require.NoError(t, qp.Destroy())
	require.NoError(t, c.CloseXRCD(x1))

	other.Close()
	c.Close()
	require.Eventually(t, func() bool { return r.srv.Usage(uid) == daemon.Usage{} }, 10*time.Second, 10*time.Millisecond,
		"all given back: %+v", r.srv.Usage(uid))
}
