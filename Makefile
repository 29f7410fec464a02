.PHONY: run test bench lint deb rpm soak fuzz

run:
	scripts/run.sh

test:
	scripts/test.sh

bench:
	cargo bench
	benches/side_by_side.sh
	benches/mqtt_side_by_side.sh
	benches/stream_side_by_side.sh
	benches/amqp1_side_by_side.sh
	benches/cluster.sh
	benches/metrics_scrape.sh
	cargo test --release --test binary slow_disk -- --ignored --nocapture

# The soak test for SOAK_SECS seconds (an hour by default; the test command
# runs it for one minute): mixed load against the real binary, failing when
# its memory, open files, threads or data directory keep growing. The samples
# are written to target/soak.csv.
SOAK_SECS ?= 3600
soak:
	LAVINMQ_SOAK_SECS=$(SOAK_SECS) LAVINMQ_SOAK_CSV=$(CURDIR)/target/soak.csv \
		cargo test --release --test binary soak -- --nocapture

# Every fuzz target in fuzz/ for FUZZ_SECS seconds each (see scripts/fuzz.sh).
FUZZ_SECS ?= 600
fuzz:
	scripts/fuzz.sh $(FUZZ_SECS)

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

# Debian package in target/debian/ (cargo-deb, installed by the setup script
# when missing; rustup's cargo may not be on make's PATH yet). Builds the
# release binaries first if they are out of date; --strip drops their debug
# info (the release profile keeps line tables, which would make the package 7
# times larger and take minutes to compress). `make deb
# CARGO_DEB_FLAGS=--no-build` packages the binaries already in target/release
# instead: after `cargo build --release --all-targets` cargo-deb's own build
# (the binaries alone) would compile the dependencies again, with the
# dev-dependencies' features left out.
CARGO_DEB_FLAGS ?=
deb:
	scripts/setup-package-deps.sh
	PATH="$$HOME/.cargo/bin:$$PATH" cargo deb --strip $(CARGO_DEB_FLAGS)

# RPM package in target/generate-rpm/ (cargo-generate-rpm, installed by the
# setup script when missing), with the files, unit and user of the Debian
# package. cargo-generate-rpm packages what is there and builds nothing: this
# builds the release binaries first if they are out of date, as `make deb`
# does, and packages stripped copies of them (target/generate-rpm/bin/; the
# binaries in target/release keep their line tables). `make rpm
# RPM_NO_BUILD=1` packages the binaries already in target/release instead,
# like `make deb CARGO_DEB_FLAGS=--no-build`. The payload is zstd level 19,
# as distributions ship it (about 18 s of CPU);
# CARGO_GENERATE_RPM_FLAGS="--payload-compress gzip" takes 2 s for a
# package half as large again (12 MB instead of 7.7).
RPM_NO_BUILD ?=
CARGO_GENERATE_RPM_FLAGS ?=
rpm:
	scripts/setup-package-deps.sh
	$(if $(RPM_NO_BUILD),,PATH="$$HOME/.cargo/bin:$$PATH" cargo build --release --bins)
	mkdir -p target/generate-rpm/bin
	for b in lavinmq lavinmqctl lavinmqperf; do \
		strip --strip-unneeded -o target/generate-rpm/bin/$$b target/release/$$b || exit 1; \
	done
	PATH="$$HOME/.cargo/bin:$$PATH" cargo generate-rpm $(CARGO_GENERATE_RPM_FLAGS)
