# softnic: build, test, generate, benchmark.
# Integration tests (XDP, AF_XDP, namespaces, the rxe guest) need root; as
# another user they skip and say what they need.

GO ?= go
PKGS := ./...
BIN := bin/softnic

.PHONY: all build provider test test-short generate bench bench-dcqcn bench-vm microbench lint fuzz demo clean \
	install uninstall deb

# softnic version prints these (cmd/softnic/version.go).
VERSION ?= 0.1.0
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

all: build

# softnic is built without cgo (nothing in it needs cgo): softnic daemon
# drops its privileges on every thread (syscall.AllThreadsSyscall), which the
# Go runtime refuses in a cgo binary; a cgo build of the daemon does not start.
build: provider
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/softnic
	cp provider/libsoftnic-rdmav34.so provider/librdmacm.so.1 bin/

# The libibverbs provider (C, the system compiler, libibverbs-dev's
# headers): stock RDMA programs on softnic devices through `softnic exec`,
# which finds it next to bin/softnic.
provider:
	$(MAKE) -C provider

# The main job: two namespaces joined by a veth pair, a softnic server and a
# client running a ping-pong and an RDMA WRITE bandwidth test over AF_XDP,
# then Debian's own ib_write_bw through softnic daemons and the provider.
demo:
	GO=$(GO) bash demo/deps.sh
	$(MAKE) build
	bash demo/demo.sh

# The whole suite: unit, fault-injection, integration and system tests
# (root: test/system, test/middleware, test/isolation) and interop (root + qemu).
# The interop tests run last, alone: their qemu TCG guests need the host's CPUs
# (a guest whose NIC stalls is replaced: test/interop/README.md).
test:
	$(GO) test -count=1 -timeout 30m $$($(GO) list $(PKGS) | grep -v /test/interop)
	$(GO) test -count=1 -timeout 30m ./test/interop/...

# Unit tests only, quick.
test-short:
	$(GO) test -short -count=1 $(PKGS)

# Regenerate package hostif's layouts from provider/hostif.h (the C
# compiler), then the eBPF objects and their Go bindings, little- and
# big-endian (needs clang, llvm-strip and libbpf-dev; bpf/gen.sh finds
# Debian's multiarch include path on any architecture).
generate:
	$(GO) generate ./hostif/... ./bpf/...

# The side-by-side benchmark (root): the raw AF_XDP ceiling, kernel TCP and
# UDP, and softnic's perftest figures between two namespaces, in one table
# with ratios and targets; writes bench/results/latest.{md,png} (CPU and heap
# profiles go to a temporary directory: bin/benchsuite -h, -profile-dir).
# About 3-5 minutes. BENCHFLAGS passes options (e.g. -duration 2s).
bench:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/softnic
	$(GO) build -o bin/xdpblast ./bench/xdpblast
	$(GO) build -o bin/benchsuite ./bench/suite
	bash bench/install-deps.sh
	bin/benchsuite -softnic $(BIN) -xdpblast bin/xdpblast -out bench/results $(BENCHFLAGS)

# Congestion control (root, clang for the BPF marker): two senders into one
# 1 Gb/s tbf bottleneck through a router namespace, with DCQCN at
# ConnectX's defaults, with hyper increase at 5 Mb/s, and without; with
# and without on a 512 KB queue, which the senders' windows overflow; the
# same with sender 1 at IB MTU 1024, and that with the receiver sending at
# most one CNP per QP per 50 us (the paper's interval) and hyper increase
# at 5 Mb/s; 20 s each, 5 interleaved rounds (-repeat); writes
# bench/results/dcqcn.{md,svg} and dcqcn-windows.txt. About 20 minutes.
bench-dcqcn:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/softnic
	$(GO) build -o bin/benchsuite ./bench/suite
	bash bench/install-deps.sh
	bin/benchsuite -only dcqcn -softnic $(BIN) -out bench/results -dcqcn-flags "--softnic-rpg-hai-rate=5" -dcqcn-mtu-cnp-interval 50us $(BENCHFLAGS)

# softnic against Linux rdma_rxe (root, qemu): two Debian 13 guests with
# trixie-backports' kernel (its virtio-net offers zero-copy AF_XDP; the
# image is fetched and built on first use, about 120 MB) under qemu TCG on
# a bridge, rxe and a static softnic build bound in copy mode and in
# zero-copy taking turns on the same guests (write_bw 64 KiB, write_lat 8 B,
# 64 B message rate; one vCPU and two, each with one virtio-net queue pair
# and with twice as many as vCPUs, all pairs in use: bench/vmqueues); writes
# bench/results/vm.{md,png}. BENCHVMFLAGS passes options (bin/benchsuite -h: -vm-*).
bench-vm:
	CGO_ENABLED=0 $(GO) build -o bin/softnic-static ./cmd/softnic
	CGO_ENABLED=0 $(GO) build -o bin/vmqueues ./bench/vmqueues
	$(GO) build -o bin/benchsuite ./bench/suite
	bash test/interop/install-deps.sh
	bin/benchsuite -vm -softnic bin/softnic-static -out bench/results $(BENCHVMFLAGS)

# Go micro-benchmarks of the engine, framing and verbs (in-memory link).
# The Go micro-benchmarks, then the engine's per-core figures over the raw
# ceiling's of the same run (bench/engineratio.awk; issue #37).
microbench:
	@out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	$(GO) test -run '^$$' -bench . -benchmem ./ibtransport/... ./roce/... ./verbs/... >$$out; st=$$?; \
	cat $$out; awk -f bench/engineratio.awk $$out; exit $$st

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# A short fuzzing pass over every fuzz target in the tree (parsers, the
# engine's receive path, the XDP program's steering decision: that one needs
# root), then the C provider's and librdmacm's libFuzzer harnesses (FUZZTIME in
# seconds).
FUZZTIME ?= 20s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done
	@echo "== provider (libFuzzer, clang)"
	$(MAKE) -s -C provider fuzz
	provider/fuzz-provider -max_total_time=$$(echo $(FUZZTIME) | tr -d s) -artifact_prefix=provider/
	provider/fuzz-rdmacm -max_total_time=$$(echo $(FUZZTIME) | tr -d s) -artifact_prefix=provider/

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary in PREFIX/bin,
# the provider and librdmacm.so.1 in PREFIX/lib/softnic (softnic exec finds
# them as ../lib/softnic beside its binary, wherever that is), softnic.service
# in PREFIX/lib/systemd/system (systemd looks there for /usr and /usr/local)
# running the installed binary with $$SOFTNIC_ARGS from
# SYSCONFDIR/default/softnic, softnic(1), made of softnic help, and the
# bash completion (softnic completion bash) in PREFIX/share. An
# existing SYSCONFDIR/default/softnic is kept. Nothing is enabled. What
# `make` built is installed (built first if absent), so `sudo make install`
# needs no Go toolchain on root's PATH.
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=
BINDIR := $(PREFIX)/bin
LIBDIR := $(PREFIX)/lib/softnic
UNITDIR := $(PREFIX)/lib/systemd/system
MAN1DIR := $(PREFIX)/share/man/man1
COMPLETIONDIR := $(PREFIX)/share/bash-completion/completions
INSTALL ?= install

install:
	@[ -x $(BIN) ] && [ -f bin/libsoftnic-rdmav34.so ] && [ -f bin/librdmacm.so.1 ] || $(MAKE) build
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MAN1DIR) \
		$(DESTDIR)$(COMPLETIONDIR) $(DESTDIR)$(SYSCONFDIR)/default
	$(INSTALL) -m 755 $(BIN) $(DESTDIR)$(BINDIR)/softnic
	$(INSTALL) -m 644 bin/libsoftnic-rdmav34.so bin/librdmacm.so.1 $(DESTDIR)$(LIBDIR)/
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' dist/systemd/softnic.service.in \
		>$(DESTDIR)$(UNITDIR)/softnic.service
	chmod 644 $(DESTDIR)$(UNITDIR)/softnic.service
	sh dist/manpage.sh $(BIN) $(VERSION) | gzip -9n >$(DESTDIR)$(MAN1DIR)/softnic.1.gz
	chmod 644 $(DESTDIR)$(MAN1DIR)/softnic.1.gz
	$(BIN) completion bash >$(DESTDIR)$(COMPLETIONDIR)/softnic
	chmod 644 $(DESTDIR)$(COMPLETIONDIR)/softnic
	[ -e $(DESTDIR)$(SYSCONFDIR)/default/softnic ] || \
		$(INSTALL) -m 644 dist/default/softnic $(DESTDIR)$(SYSCONFDIR)/default/softnic

# Removes what install put; SYSCONFDIR/default/softnic only while it is
# as installed (an edited one is the administrator's and stays).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/softnic $(DESTDIR)$(LIBDIR)/libsoftnic-rdmav34.so $(DESTDIR)$(LIBDIR)/librdmacm.so.1 \
		$(DESTDIR)$(UNITDIR)/softnic.service $(DESTDIR)$(MAN1DIR)/softnic.1.gz $(DESTDIR)$(COMPLETIONDIR)/softnic
	-rmdir $(DESTDIR)$(LIBDIR)
	if cmp -s dist/default/softnic $(DESTDIR)$(SYSCONFDIR)/default/softnic; then \
		rm -f $(DESTDIR)$(SYSCONFDIR)/default/softnic; fi

# make deb: bin/softnic_VERSION_ARCH.deb with dpkg-deb alone: install with
# PREFIX=/usr into a staging tree, then the control file (Depends: the
# provider and librdmacm.so.1 link libibverbs1 and libc6 only; the binary is
# static), /etc/default/softnic as a conffile, and the maintainer scripts
# (dist/deb: nothing enabled; prerm stops the service; purge removes the
# flags file).
DEBVERSION := $(VERSION)+git$(shell git rev-parse --short HEAD 2>/dev/null || echo 0)
DEBARCH := $(shell dpkg --print-architecture 2>/dev/null)
DEBROOT := bin/deb-root
DEB := bin/softnic_$(DEBVERSION)_$(DEBARCH).deb

deb: build
	rm -rf $(DEBROOT)
	$(MAKE) install DESTDIR=$(CURDIR)/$(DEBROOT) PREFIX=/usr SYSCONFDIR=/etc
	$(INSTALL) -d $(DEBROOT)/DEBIAN
	$(INSTALL) -m 755 dist/deb/postinst dist/deb/prerm dist/deb/postrm $(DEBROOT)/DEBIAN/
	echo /etc/default/softnic >$(DEBROOT)/DEBIAN/conffiles
	sed -e 's|@VERSION@|$(DEBVERSION)|' -e 's|@ARCH@|$(DEBARCH)|' \
		-e "s|@SIZE@|$$(du -sk --exclude=DEBIAN $(DEBROOT) | cut -f1)|" dist/deb/control.in >$(DEBROOT)/DEBIAN/control
	dpkg-deb --root-owner-group --build $(DEBROOT) $(DEB)
	rm -rf $(DEBROOT)

clean:
	rm -rf bin
	$(MAKE) -C provider clean
