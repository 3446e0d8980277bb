# dropbehind: `make demo` builds and shows the main job; `make test` runs every test.
CARGO ?= cargo
PREFIX ?= /usr/local
RELEASE := target/release
LIB := $(RELEASE)/libdropbehind.so
BIN := $(RELEASE)/dropbehind

.PHONY: all build demo test lint unit-test shim-test install uninstall bench bench-quick clean

all: build

build:
	$(CARGO) build --release --locked --all-targets

demo: build
	scripts/demo.sh

# Formatting and clippy with the installed toolchain (no toolchain file: nothing to download);
# a missing rustfmt or clippy is named in one line and the rest still runs.
lint:
	@if $(CARGO) fmt --version >/dev/null 2>&1; then $(CARGO) fmt --all -- --check; \
	else echo "lint: rustfmt is not installed, formatting not checked"; fi
	@if $(CARGO) clippy --version >/dev/null 2>&1; then \
	$(CARGO) clippy --release --locked --all-targets -- -D warnings; \
	else echo "lint: clippy is not installed, lints not checked"; fi

unit-test:
	$(CARGO) test --release --locked --workspace

shim-test: build
	shim-tests/run.sh

test: lint unit-test shim-test

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/dropbehind
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libdropbehind.so

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/dropbehind $(DESTDIR)$(PREFIX)/lib/libdropbehind.so

# BENCH_ARGS: more options for bench/run.sh, e.g. BENCH_ARGS="--vs-lib /old/libdropbehind.so"
bench: build
	bench/run.sh --full $(BENCH_ARGS)

bench-quick: build
	bench/run.sh --quick $(BENCH_ARGS)

clean:
	$(CARGO) clean
