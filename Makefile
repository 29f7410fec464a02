.PHONY: run test bench lint

run:
	cargo build --release --bin lavinmq
	mkdir -p ./tmp/data
	./target/release/lavinmq -D ./tmp/data

test:
	./scripts/setup-test-deps.sh && cargo build --release --all-targets && cargo test --release && LAVINMQ_BIN=target/release/lavinmq tests/compat/run.sh

bench:
	cargo bench
	benches/side_by_side.sh

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
