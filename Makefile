# Thin wrapper over Meson + Ninja for the README's commands.
#   make          build build/cae and libcae (installs missing build packages when root)
#   make check    install what the tests need, then every test: normal build, ASan+UBSan build,
#                 fuzz-corpus replays, bounded fuzz runs, Docker and MCP client tests
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

check: test-deps
	@scripts/check.sh

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
