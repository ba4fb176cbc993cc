package hostif

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAsyncEventRecord: the record is struct ib_uverbs_async_event_desc,
// little-endian: u64 element, u32 event type, u32 reserved (0).
func TestAsyncEventRecord(t *testing.T) {
	rec := AsyncEvent(0x0102030405060708, EventPortErr)
	assert.Equal(t, [AsyncEventLen]byte{8, 7, 6, 5, 4, 3, 2, 1, 10, 0, 0, 0, 0, 0, 0, 0}, rec)
	element, typ := ParseAsyncEvent(rec)
	assert.Equal(t, uint64(0x0102030405060708), element)
	assert.Equal(t, EventPortErr, typ)
}
