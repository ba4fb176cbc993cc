// Package hostif is softnic's host interface: the byte layouts of the rings
// that the daemon and its clients share (docs/HOST-INTERFACE.md), as typed
// views over the shared memory, like a NIC's descriptor formats.
//
// A client (package verbs in daemon mode, or the C provider) encodes work
// requests into a WorkQueue's entries and polls a CompletionQueue; the
// daemon decodes the entries, which the client may change at any moment, so
// every Decode works on a copy and checks every field.
//
//	sq := hostif.NewWorkQueue(mem, depth, stride)
//	e, ok := sq.Next() // the client's next free entry
//	if !ok {
//		return errQueueFull
//	}
//	if err := hostif.EncodeSend(e, &wr, 0); err != nil {
//		return err
//	}
//	sq.Publish()
package hostif

// The layouts shared with the C provider come from provider/hostif.h:
// layoutgen writes them to ztypes_hostif.go from types_hostif.go.
//
//go:generate go run ./internal/cmd/layoutgen -I ../provider -o ztypes_hostif.go types_hostif.go
