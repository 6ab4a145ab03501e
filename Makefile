# Thin wrapper over Meson + Ninja for the README's commands.
#   make          build build/cae and libcae (installs missing build packages when root)
#   make check    install what the tests need, then every test: normal build, ASan+UBSan build,
#                 fuzz-corpus replays, bounded fuzz runs, Docker, Kubernetes and MCP client tests
#                 (the single-node cluster of scripts/k8s-env.sh is brought up before and
#                 down after, when this run started it)
#   make demo     build and run the main job on the local backend (scripts/demo.sh)
#   make bench    run the benchmarks (bench/run.sh), figures go to BENCHMARKS.md by hand
#   make fuzz     build the libFuzzer targets with clang and run each for FUZZ_SECONDS
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30

.PHONY: all deps test-deps check demo bench fuzz clean lint

all: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

deps:
	@scripts/install-deps.sh build

test-deps:
	@scripts/install-deps.sh test

$(BUILD)/build.ninja:
	meson setup $(BUILD) --werror

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) --werror -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug

$(FUZZ_BUILD)/build.ninja:
	CC=clang meson setup $(FUZZ_BUILD) --werror -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined \
	  -Db_lundef=false -Dbuildtype=debug -Dc_args=-fsanitize=fuzzer-no-link

# The cluster comes up first, with the test images imported from the Docker engine (hence
# docker-env.sh up before it; check.sh's own is then a cached no-op), the kubernetes suites
# run with CAE_TEST_K8S=1 and its KUBECONFIG, and goes down whatever the tests did; the tests' status is make's.
check: test-deps
	@if [ -x scripts/k8s-env.sh ] && scripts/docker-env.sh up && kc=$$(scripts/k8s-env.sh up); then \
	  eval "$$kc"; export KUBECONFIG CAE_TEST_K8S=1; \
	else echo "check: the Kubernetes cluster could not be started (see above)" >&2; k8s_failed=1; fi; \
	scripts/check.sh; rc=$$?; \
	[ -x scripts/k8s-env.sh ] && { scripts/k8s-env.sh down || rc=1; }; \
	[ -z "$${k8s_failed:-}" ] || rc=1; exit $$rc

demo: all
	@scripts/demo.sh

bench: all
	@bench/run.sh

fuzz: deps $(FUZZ_BUILD)/build.ninja
	ninja -C $(FUZZ_BUILD)
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

lint:
	@scripts/lint.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
