// Package pingpong is rdma-core's ibv_rc_pingpong on softnic's verbs: one
// RC QP, an address exchange over TCP in the tool's format (package
// tools/oob), then Iters sends each way, one outstanding at a time, and
// the tool's two result lines. Either end may be the real ibv_rc_pingpong.
// With Config.UD it is ibv_ud_pingpong instead (ud.go): a UD QP, an
// address handle to the peer, and the GRH's 40 bytes before the message.
// With Config.UC it is ibv_uc_pingpong: rc_pingpong's exchange over UC QPs.
//
// Run is rc_pingpong.c's main after option parsing; its steps keep the
// names of the C functions they follow (pp_init_ctx, pp_connect_ctx, the
// client and server address exchanges, the completion loop).
package pingpong
