package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softnic/softnic/daemon/client"
	"github.com/softnic/softnic/hostif"
)

// FuzzControlMessages sends arbitrary messages to a running daemon on a
// session that said hello: each gets an error reply, or the session ends
// (a message that is not one of ours), and the daemon keeps serving new
// sessions.
func FuzzControlMessages(f *testing.F) {
	buf := make([]byte, hostif.MaxMessage)
	seed := func(op hostif.Op, body any) {
		msg, err := hostif.Encode(buf, hostif.Header{Op: op, Seq: 7}, body)
		require.NoError(f, err)
		f.Add(append([]byte{}, msg...))
	}
	seed(hostif.OpAllocPD, hostif.Empty{})
	seed(hostif.OpRegMR, hostif.RegMRRequest{PD: 1, Access: 7, Addr: 4096, Length: 1 << 40})
	seed(hostif.OpCreateCQ, hostif.CreateCQRequest{Entries: 1 << 30, Channel: 3})
	seed(hostif.OpCreateQP, hostif.CreateQPRequest{PD: 1, SendCQ: 2, RecvCQ: 2, MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1 << 20})
	seed(hostif.OpModifyQP, hostif.ModifyQPRequest{Handle: 3, Mask: 0xffffffff, State: 9, PathMTU: 200})
	seed(hostif.OpDestroyQP, hostif.HandleRequest{Handle: 3})
	seed(hostif.OpHello, hostif.HelloRequest{Version: 1})
	seed(hostif.OpQueryResources, hostif.ResourcesRequest{After: 1 << 31})
	seed(hostif.Op(999), hostif.Empty{})

	r := newRig(f)
	var conn *client.Conn
	f.Fuzz(func(t *testing.T, msg []byte) {
		if conn == nil {
			c, err := client.Dial(r.socket)
			require.NoError(t, err, "the daemon stopped serving")
			conn = c
		}
		if err := conn.Raw(msg, 5*time.Second); err != nil {
			conn.Close()
			conn = nil // the session ended; the next input dials again
		}
	})
}
