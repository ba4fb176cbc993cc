// Package mad holds typed byte-slice views of InfiniBand management
// datagrams (MADs) and of the communication management (CM) messages they
// carry: the common MAD header, REQ, MRA, REJ, REP, RTU, DREQ and DREP
// (IBA vol 1 ch. 12, laid out as in Linux include/rdma/ibta_vol1_c12.h), the
// rdma_cm private-data header at the start of a REQ's private data, and the
// rdma_cm service IDs.
//
// A MAD rides an IB UD SEND to QP1 (the general services QP) and knows
// nothing of Ethernet or IP, so this package sits under ibtransport. Views
// alias the buffer they were made from; getters and setters allocate
// nothing, so the QP1 receive path can parse and count bad MADs in place.
//
// Offsets in the layout comments are from the start of the 256-byte MAD;
// IBA's tables count from the end of the 24-byte common header, so a field
// IBA puts at byte n of a message is at byte 24+n here. Bit numbers are those
// of a byte, 7 the most significant.
package mad
