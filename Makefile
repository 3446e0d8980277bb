# dropbehind: `make demo` builds and shows the main job; `make test` runs every test.
CARGO ?= cargo
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
# The launcher finds the library in ../lib or ../lib/<multiarch> of its own directory.
LIBDIR ?= $(PREFIX)/lib
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
RELEASE := target/release
# The library a process preloads is the front (front/, built with its own profile and put
# beside the engine it loads on first work, libdropbehind_engine.so).
LIB := $(RELEASE)/libdropbehind.so
ENGINE := $(RELEASE)/libdropbehind_engine.so
BIN := $(RELEASE)/dropbehind
# The man page and completions, generated from the launcher's own argument definitions.
GEN := $(RELEASE)/generated
# Where `make deb` puts the package.
DEBDIR ?= target/deb

# tool:package for everything the tests use; a missing tool makes the checks that need it
# skip with the reason. `make deps` installs the missing ones, `make test` names them.
TEST_DEPS := rsync:rsync strace:strace bc:bc mkfs.ext4:e2fsprogs setpriv:util-linux \
	fincore:util-linux losetup:mount cc:gcc python3:python3 make:make tar:tar gzip:gzip \
	xz:xz-utils sqlite3:sqlite3 perl:perl git:git valgrind:valgrind mkfs.btrfs:btrfs-progs \
	mkfs.xfs:xfsprogs nbdkit:nbdkit nbdfuse:libnbd-bin fusermount3:fuse3 fio:fio \
	dpkg-deb:dpkg dpkg-shlibdeps:dpkg-dev man:man-db zsh:zsh fish:fish \
	restic:restic rclone:rclone pv:pv
deps-missing = $(sort $(foreach d,$(TEST_DEPS),$(if $(shell command -v $(word 1,$(subst :, ,$(d))) 2>/dev/null),,$(word 2,$(subst :, ,$(d))))))

.PHONY: all build generated demo deps deps-check test lint unit-test shim-test install uninstall deb bench bench-quick clean

all: build

build:
	$(CARGO) build --release --locked --all-targets
	@# The front's trampolines are x86_64 assembly: elsewhere the engine is the preload.
	if [ "$$(uname -m)" = x86_64 ]; then \
		$(CARGO) build --profile front --locked -p dropbehind-front && \
		install -m 755 target/front/libdropbehind.so $(LIB); \
	else install -m 755 $(ENGINE) $(LIB); fi

generated: build
	@mkdir -p $(GEN)
	$(BIN) --generate man >$(GEN)/dropbehind.1
	$(BIN) --generate bash >$(GEN)/dropbehind.bash
	$(BIN) --generate zsh >$(GEN)/_dropbehind
	$(BIN) --generate fish >$(GEN)/dropbehind.fish

demo: build
	scripts/demo.sh

# Installs the Debian packages the tests use (apt-get, as root or through sudo).
deps:
	@m="$(deps-missing)"; \
	if [ -z "$$m" ]; then echo "deps: everything the tests use is installed"; exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then echo "deps: no apt-get here; install: $$m"; exit 1; fi; \
	sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	echo "deps: installing $$m"; \
	$$sudo apt-get update -qq && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$m >/dev/null

deps-check:
	@m="$(deps-missing)"; [ -z "$$m" ] || \
	echo "test: not installed: $$m (the checks needing them skip); make deps installs them"

# Formatting and clippy with the installed toolchain (no toolchain file: nothing to download);
# a missing rustfmt or clippy is named in one line and the rest still runs.
lint:
	@if $(CARGO) fmt --version >/dev/null 2>&1; then $(CARGO) fmt --all -- --check; \
	else echo "lint: rustfmt is not installed, formatting not checked"; fi
	@if $(CARGO) clippy --version >/dev/null 2>&1; then \
	$(CARGO) clippy --release --locked --all-targets -- -D warnings && \
	{ [ "$$(uname -m)" != x86_64 ] || $(CARGO) clippy --profile front --locked -p dropbehind-front -- -D warnings; }; \
	else echo "lint: clippy is not installed, lints not checked"; fi

unit-test:
	$(CARGO) test --release --locked --workspace

shim-test: build
	shim-tests/run.sh

test: deps-check lint unit-test shim-test

install: generated
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/dropbehind
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libdropbehind.so
	install -m 644 $(ENGINE) $(DESTDIR)$(LIBDIR)/libdropbehind_engine.so
	install -m 644 $(GEN)/dropbehind.1 $(DESTDIR)$(MANDIR)/man1/dropbehind.1
	install -m 644 $(GEN)/dropbehind.bash $(DESTDIR)$(BASHCOMPDIR)/dropbehind
	install -m 644 $(GEN)/_dropbehind $(DESTDIR)$(ZSHCOMPDIR)/_dropbehind
	install -m 644 $(GEN)/dropbehind.fish $(DESTDIR)$(FISHCOMPDIR)/dropbehind.fish

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/dropbehind $(DESTDIR)$(LIBDIR)/libdropbehind.so \
		$(DESTDIR)$(LIBDIR)/libdropbehind_engine.so \
		$(DESTDIR)$(MANDIR)/man1/dropbehind.1 $(DESTDIR)$(BASHCOMPDIR)/dropbehind \
		$(DESTDIR)$(ZSHCOMPDIR)/_dropbehind $(DESTDIR)$(FISHCOMPDIR)/dropbehind.fish

# A Debian package (dpkg-deb): the launcher, the library in /usr/lib/<multiarch>, the man
# page and the completions. Into $(DEBDIR).
deb: generated
	packaging/deb.sh $(DEBDIR)

# BENCH_ARGS: more options for bench/run.sh, e.g. BENCH_ARGS="--vs-lib /old/libdropbehind.so"
bench: build
	bench/run.sh --full $(BENCH_ARGS)

bench-quick: build
	bench/run.sh --quick $(BENCH_ARGS)

clean:
	$(CARGO) clean
