# Gym developer tasks. `make test` is what CI runs (see .ci/run).
SHELL := /bin/bash

CARGO ?= cargo

# Cache everything heavy outside the clone so fresh clones build fast.
GYM_CACHE_DIR ?= $(HOME)/.cache/gym
export GYM_CACHE_DIR
export CARGO_TARGET_DIR ?= $(GYM_CACHE_DIR)/target
export GYM_MODELS_DIR ?= $(CURDIR)/models
# ONNX Runtime is loaded dynamically (fastembed/ort `load-dynamic`).
export ORT_DYLIB_PATH ?= $(GYM_MODELS_DIR)/onnxruntime/libonnxruntime.so.1.31.1

ifdef CI
export CARGO_TERM_COLOR := never
endif

.DEFAULT_GOAL := build

.PHONY: setup build release test contracts deny deny-advisories features fmt clippy bench demo demo-math demo-letters clean-cache

setup:
	bash scripts/setup

# A debug build has the portable set (.cargo/config.toml), like plain `cargo build`; the sync
# has llama.cpp configured afresh if its build folder was configured with other options.
SYNC_DEBUG = bash scripts/cpu-options --portable --sync $(CARGO_TARGET_DIR)/debug > /dev/null

build: setup
	$(SYNC_DEBUG)
	$(CARGO) build --locked

# The release binary with every feature (`make demo` builds only the demo's: DEMO_FEATURES),
# built where it runs: llama.cpp also gets the AVX-512 family where this CPU has it
# (scripts/cpu-options; GYM_PORTABLE=1 for the portable set alone).
release: setup
	env $$(bash scripts/cpu-options --sync $(CARGO_TARGET_DIR)/release) $(CARGO) build --release --locked

# What `make demo` and the README's quick start need: the llama.cpp backend and the MiniLM
# embedder. Every feature makes the first build about 45 % longer (docs/setup.md, "The first
# build"); `make release` builds them all, and `make demo` then keeps them.
export DEMO_FEATURES ?= llama,embed

# llama.cpp's threads wait for each other in OpenMP barriers, spinning 300,000 rounds by default.
# The tests run several model processes at once on few cores, where that spinning starves the
# threads being waited for (docs/benchmarks.md, "Several model processes on one machine").
test: export GOMP_SPINCOUNT ?= 1000
test: setup
	$(CARGO) fmt --all --check
	$(SYNC_DEBUG)
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	bash scripts/setup-evm > /dev/null  # anvil for the governance end-to-end test
	$(CARGO) test --workspace --locked
	$(MAKE) contracts
	$(MAKE) deny

# Foundry tests of the governance contracts (offline, solc-js), and a check that the committed
# artifacts are what the sources compile to.
contracts:
	bash scripts/contracts-test
	bash scripts/contracts-artifacts --check

# Cargo tools, built once into the cache (their versions pinned here).
TOOLS_DIR := $(GYM_CACHE_DIR)/tools
CARGO_DENY := $(TOOLS_DIR)/bin/cargo-deny
CARGO_HACK := $(TOOLS_DIR)/bin/cargo-hack

$(CARGO_DENY):
	$(CARGO) install --locked --quiet cargo-deny --version 0.20.2 --root $(TOOLS_DIR)

$(CARGO_HACK):
	$(CARGO) install --locked --quiet cargo-hack --version 0.6.46 --root $(TOOLS_DIR)

# Licenses, bans and sources of every dependency (deny.toml), offline. cargo-deny reads the
# metadata of every target's dependencies (winapi, android_*), which a build on Linux never
# downloads: `cargo fetch` brings them into the registry cache first (a fresh CI machine has
# none of them).
deny: $(CARGO_DENY)
	$(CARGO) fetch --locked --quiet
	$(CARGO_DENY) deny --offline --locked check licenses bans sources

# Known vulnerabilities and yanked crates: needs the RustSec advisory database (fetched).
deny-advisories: $(CARGO_DENY)
	$(CARGO_DENY) deny --locked check advisories

# Each cargo feature on its own builds without warnings (clippy's `-D warnings` reaches only
# the workspace's crates, so the dependencies are not rebuilt for it). Not in `make test`: on 2
# cores it takes longer than the rest of the suite (every feature set re-checks dependencies).
# `cuda` is left out: it builds llama.cpp's CUDA kernels, which needs nvcc.
features: $(CARGO_HACK)
	$(CARGO_HACK) hack clippy --workspace --each-feature --exclude-features cuda --locked -- -D warnings

fmt:
	$(CARGO) fmt --all

clippy: setup
	$(SYNC_DEBUG)
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

bench: setup
	env $$(bash scripts/cpu-options --sync $(CARGO_TARGET_DIR)/release) $(CARGO) bench

demo: setup
	bash scripts/demo

# The paper's setting: the 1.5B model answers and distils, on builtin:gsm (demo-math) or on
# builtin:phrases, letters counted in phrases and words (demo-letters). Hours on 2 cores;
# run it again to resume.
demo-math: setup
	bash scripts/demo-paper math

demo-letters: setup
	bash scripts/demo-paper letters

# Removes the downloaded wheels, the extracted-model cache and the cargo target
# dir. Files already in models/ stay valid (they are hardlinks or copies).
clean-cache:
	rm -rf -- "$(GYM_CACHE_DIR)/downloads" "$(GYM_CACHE_DIR)/extracted" "$(GYM_CACHE_DIR)/.setup.lock"
	@if [ -n "$(CARGO_TARGET_DIR)" ] && [ "$(CARGO_TARGET_DIR)" != "/" ]; then \
		echo rm -rf -- "$(CARGO_TARGET_DIR)"; rm -rf -- "$(CARGO_TARGET_DIR)"; fi
