// Package systest sets up the worlds of softnic's system tests (test/...):
// the softnic binary and its C provider, built once per test binary in a
// root-owned directory every user may enter; throw-away run directories;
// `softnic daemon`s on the ends of netnstest veth pairs, watched and
// stopped when their test ends; and the command lines that run programs
// as an unprivileged user.
//
// A package that uses it calls Main from its TestMain, which removes the
// built tools once its tests are done:
//
//	func TestMain(m *testing.M) { systest.Main(m) }
//
// The tests it serves need root (namespaces, XDP, other users); they call
// netnstest.Integration (NewWorld does) and skip, or fail under CI, as
// that says.
package systest
