# Thin wrapper around CMake: installs what the build needs, builds, runs, tests.
#   make run    build and run sched-run on configs/saxpy.yaml
#   make test   the whole suite: plain (GCC), ASan+UBSan, TSan for the threaded
#               tests, clang without cuda.h, and the other build types
#   make bench  run the benchmarks and rewrite bench/RESULTS.md

BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_PORTABLE ?= build-portable
JOBS       ?= $(shell nproc)
CONFIG     ?= configs/saxpy.yaml
CMAKE_FLAGS ?=
# The project's own builds treat warnings as errors; consumers' builds do not.
OWN_FLAGS  = -DSCHEDRUN_WERROR=ON $(CMAKE_FLAGS)
# Where the CUDA toolkit's cuda.h lies here, hidden from the portable build so
# that it configures as on a machine without the toolkit.
CUDA_INCLUDE_DIRS = $(sort /usr/local/cuda/include $(realpath /usr/local/cuda/include) /opt/cuda/include)

# Debian packages the build and the host backend need (python3-numpy and
# graphviz: the tests read --output with numpy.load and render --dot with dot).
DEB_PACKAGES = build-essential g++ clang binutils cmake pkg-config libzmq3-dev libmsgpack-dev \
               libyaml-dev libcmocka-dev libssl-dev libjson-c-dev python3-numpy graphviz \
               openmpi-bin libopenmpi-dev

.PHONY: all deps build run test test-plain test-asan test-tsan test-portable test-build-types bench fuzz clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing (run 'make deps' as root)"; exit 1; \
	  fi; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(OWN_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/sched-run $(CONFIG)

test-plain: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# ASan+UBSan with clang, which also builds the libFuzzer targets (ctest label
# fuzz: each corpus replayed, then a short bounded run).
test-asan: deps
	CC=clang cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSCHEDRUN_SANITIZE=address -DSCHEDRUN_FUZZ=ON $(OWN_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ctest --output-on-failure -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DSCHEDRUN_SANITIZE=thread $(OWN_FLAGS)
	cmake --build $(BUILD_TSAN) -j $(JOBS)
	cd $(BUILD_TSAN) && ctest --output-on-failure -j $(JOBS) -L 'actors|cuda-double|mpi|builder|dag'

# clang, Release, with cuda.h out of reach: the CUDA backend is left out and
# the whole plain suite still passes (test_no_cuda exists only in such a build).
test-portable: deps
	env -u CUDA_HOME -u CUDA_PATH CC=clang cmake -S . -B $(BUILD_PORTABLE) -DCMAKE_BUILD_TYPE=Release \
	  "-DCMAKE_IGNORE_PATH=$(subst $(eval) ,;,$(CUDA_INCLUDE_DIRS))" $(OWN_FLAGS)
	cmake --build $(BUILD_PORTABLE) -j $(JOBS)
	cd $(BUILD_PORTABLE) && ctest --output-on-failure --no-tests=error -R '^test_no_cuda$$' && \
	  ctest --output-on-failure -j $(JOBS)

# The other build types build too (the library and sched-run; GCC).
test-build-types: deps
	for t in Debug Release MinSizeRel; do \
	  cmake -S . -B build-$$t -DCMAKE_BUILD_TYPE=$$t -DSCHEDRUN_BUILD_TESTS=OFF \
	    -DSCHEDRUN_BUILD_BENCH=OFF -DSCHEDRUN_BUILD_EXAMPLES=OFF $(OWN_FLAGS) >/dev/null && \
	  cmake --build build-$$t -j $(JOBS) >/dev/null && echo "build type $$t: built" || exit 1; \
	done

test: test-plain test-asan test-tsan test-portable test-build-types

# StarPU, the peer the benchmarks compare with, is only needed here.
bench: build
	@dpkg-query -W -f='$${Status}' libstarpu-dev 2>/dev/null | grep -q "install ok installed" || \
	  { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libstarpu-dev >/dev/null; \
	    else echo "libstarpu-dev is missing: the StarPU side is skipped"; fi; }
	@if pkg-config --exists starpu-1.3; then \
	  $(CC) -O2 -o $(BUILD)/starpu_bench bench/peers/starpu_bench.c $$(pkg-config --cflags --libs starpu-1.3); \
	fi
	./bench/run.sh $(BUILD)

# The fuzzers for longer: FUZZ_SECONDS each (default 300), new inputs kept in
# the build tree; the last lines of each run give executions and exec/s.
FUZZ_SECONDS ?= 300
fuzz: deps
	CC=clang cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSCHEDRUN_SANITIZE=address -DSCHEDRUN_FUZZ=ON $(OWN_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target fuzz_codec fuzz_loader fuzz_expr
	for t in codec loader expr; do \
	  mkdir -p $(BUILD_ASAN)/tests/fuzz-work/$$t; \
	  ./$(BUILD_ASAN)/tests/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 $(BUILD_ASAN)/tests/fuzz-work/$$t tests/fuzz/corpus/$$t 2>&1 | \
	    grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==ERROR|SUMMARY)' | sed "s/^/$$t: /"; \
	done

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_PORTABLE) build-Debug build-Release build-MinSizeRel
