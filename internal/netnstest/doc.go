// Package netnstest builds throw-away network topologies for integration
// tests: two network namespaces joined by a veth pair, with a chosen MTU,
// queue count and addresses, and runs code inside either namespace.
//
// Everything it creates is removed by Pair.Close, which New's callers must
// call and NewT registers with t.Cleanup, so a failing or panicking test
// leaves no namespace or interface behind. Namespaces are named
// snt<pid>-<n>a and snt<pid>-<n>b; New also deletes those of netnstest
// processes that died without cleaning up (SIGKILL, test timeout). Creating namespaces needs root
// (CAP_SYS_ADMIN and CAP_NET_ADMIN); Integration skips a test with -short, and as another user with a message
// saying so.
//
// Typical use:
//
//	func TestSomething(t *testing.T) {
//		netnstest.Integration(t)
//		p := netnstest.NewT(t, netnstest.Config{MTU: 9000})
//		err := p.A.Do(func() error {
//			// Sockets created here live in namespace A, and stay
//			// there when used from other goroutines later.
//			return nil
//		})
//		...
//		if err := p.B.Ping(p.A.Addr4(), time.Second); err != nil { ... }
//	}
//
// Both ends get the default addresses 10.47.0.1/24 / fd47::1/64 (A) and
// 10.47.0.2/24 / fd47::2/64 (B) unless Config says otherwise; IPv6 addresses
// are added without duplicate address detection so they are usable at once.
package netnstest
