package hostif

import "encoding/binary"

// AsyncEvent is an async event record: u64 element (the user handle of
// the QP, CQ or SRQ, or the port number of a port's event), u32 event
// type, u32 reserved.
func AsyncEvent(element uint64, typ uint32) [AsyncEventLen]byte {
	var rec [AsyncEventLen]byte
	binary.LittleEndian.PutUint64(rec[offAsyncElement:], element)
	binary.LittleEndian.PutUint32(rec[offAsyncEventType:], typ)
	return rec
}

// ParseAsyncEvent returns an async event record's element and type.
func ParseAsyncEvent(rec [AsyncEventLen]byte) (element uint64, typ uint32) {
	return binary.LittleEndian.Uint64(rec[offAsyncElement:]), binary.LittleEndian.Uint32(rec[offAsyncEventType:])
}
