// Package interop holds interoperability tests of softnic against Linux
// rdma_rxe running in qemu guests (see rxeguest), and checks of the golden
// frames under roce/testdata that those guests and real NICs produced.
package interop
