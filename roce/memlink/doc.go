// Package memlink is an in-memory roce.Link pair for tests and benchmarks:
// what one end sends the other receives, with optional seeded, deterministic
// fault injection (loss, duplication, reordering, delay and bit corruption).
//
// The fault decisions for the frames sent in one direction come from a
// pseudo-random generator seeded from Config.Seed, so the n-th frame sent
// meets the same fate in every run. Frames travel without copies: a frame
// stays in the sender's TX buffer until the receiver has handled it, and the
// buffer then returns to the sender's pool.
package memlink
