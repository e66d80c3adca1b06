# Conveniences; the scripts are the source of truth (they need only bash).
.PHONY: build setup test bench

build:
	scripts/build.sh

setup:
	scripts/setup.sh

test:
	scripts/test.sh

bench: build
	go test -run '^$$' -bench . -benchtime 50x ./internal/service/
