.PHONY: run test bench lint

run:
	scripts/run.sh

test:
	scripts/test.sh

bench:
	cargo bench
	benches/side_by_side.sh
	benches/mqtt_side_by_side.sh
	benches/cluster.sh

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
