// Package isolation holds system tests of issue #32's isolation, written as
// a local attacker would attack `softnic daemon`: real daemons on the two
// ends of a veth pair (internal/netnstest), unprivileged users (uid 65534
// and 65533) reaching them through the C provider (`softnic exec`) and the
// Go client (daemon/client), a setuid-root program, descriptor and
// address-space exhaustion, and a fuzzer of the control protocol running
// as a second user while a first user's transfer goes on.
//
// The tests run as root (they make namespaces, start daemons and change
// users); as another user, or with -short, they skip, and under CI they
// fail instead (netnstest.Need). The test binary plays the unprivileged
// users' Go programs itself: TestMain runs a role when
// SOFTNIC_ISOLATION_ROLE names one (roles_test.go).
package isolation
