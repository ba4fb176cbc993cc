package bpf

// The generated softnic_bpfel.* (little-endian hosts) and softnic_bpfeb.*
// (big-endian hosts) are committed so that go build needs no clang. Rebuild
// them with `go generate ./bpf` (or `make generate`); gen.sh finds the
// multiarch include path Debian's clang needs.
//go:generate sh gen.sh
