package bpf

// The generated softnic_bpfel.go and softnic_bpfel.o are committed so that
// go build needs no clang. Rebuild them with `go generate ./bpf` (or
// `make generate`); Debian's clang 14 needs the multiarch include path.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type counter softnic softnic.c
