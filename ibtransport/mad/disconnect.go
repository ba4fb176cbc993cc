package mad

// RTU is a ReadyToUse: the active side's QP is ready.
//
//	byte 24-27   local communication ID
//	byte 28-31   remote communication ID
//	byte 32-255  private data (224 bytes)
type RTU []byte

// LocalCommID returns the sender's communication ID.
func (r RTU) LocalCommID() uint32 { return u32(r, offLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (r RTU) SetLocalCommID(id uint32) { putU32(r, offLocalCommID, id) }

// RemoteCommID returns the receiver's communication ID.
func (r RTU) RemoteCommID() uint32 { return u32(r, offRemoteCommID) }

// SetRemoteCommID sets the receiver's communication ID.
func (r RTU) SetRemoteCommID(id uint32) { putU32(r, offRemoteCommID, id) }

// PrivateData returns the 224 bytes of private data.
func (r RTU) PrivateData() []byte { return r[rtuPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (r RTU) SetPrivateData(p []byte) error { return setPrivateData(r.PrivateData(), p) }

// DREQ is a DisconnectRequest.
//
//	byte 24-27   local communication ID
//	byte 28-31   remote communication ID
//	byte 32-34   remote QPN (the receiver's QP)
//	byte 35      reserved
//	byte 36-255  private data (220 bytes)
type DREQ []byte

// LocalCommID returns the sender's communication ID.
func (d DREQ) LocalCommID() uint32 { return u32(d, offLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (d DREQ) SetLocalCommID(id uint32) { putU32(d, offLocalCommID, id) }

// RemoteCommID returns the receiver's communication ID.
func (d DREQ) RemoteCommID() uint32 { return u32(d, offRemoteCommID) }

// SetRemoteCommID sets the receiver's communication ID.
func (d DREQ) SetRemoteCommID(id uint32) { putU32(d, offRemoteCommID, id) }

// RemoteQPN returns the receiver's QP number.
func (d DREQ) RemoteQPN() uint32 { return u24(d, dreqRemoteQPN) }

// SetRemoteQPN sets the receiver's QP number.
func (d DREQ) SetRemoteQPN(q uint32) { putU24(d, dreqRemoteQPN, q) }

// PrivateData returns the 220 bytes of private data.
func (d DREQ) PrivateData() []byte { return d[dreqPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (d DREQ) SetPrivateData(p []byte) error { return setPrivateData(d.PrivateData(), p) }

// DREP is a DisconnectReply.
//
//	byte 24-27   local communication ID
//	byte 28-31   remote communication ID
//	byte 32-255  private data (224 bytes)
type DREP []byte

// LocalCommID returns the sender's communication ID.
func (d DREP) LocalCommID() uint32 { return u32(d, offLocalCommID) }

// SetLocalCommID sets the sender's communication ID.
func (d DREP) SetLocalCommID(id uint32) { putU32(d, offLocalCommID, id) }

// RemoteCommID returns the receiver's communication ID.
func (d DREP) RemoteCommID() uint32 { return u32(d, offRemoteCommID) }

// SetRemoteCommID sets the receiver's communication ID.
func (d DREP) SetRemoteCommID(id uint32) { putU32(d, offRemoteCommID, id) }

// PrivateData returns the 224 bytes of private data.
func (d DREP) PrivateData() []byte { return d[drepPrivateData:Len:Len] }

// SetPrivateData copies p into the private data and zeroes the rest of it.
func (d DREP) SetPrivateData(p []byte) error { return setPrivateData(d.PrivateData(), p) }
