# Thin wrapper around CMake: installs what the build needs, builds, runs, tests.
#   make run    build and run sched-run on configs/saxpy.yaml
#   make test   build twice (plain, ASan+UBSan) and run the suite; actor tests also under TSan
#   make bench  run the benchmarks and rewrite bench/RESULTS.md

BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
JOBS       ?= $(shell nproc)
CONFIG     ?= configs/saxpy.yaml
CMAKE_FLAGS ?=

# Debian packages the build and the host backend need.
DEB_PACKAGES = build-essential g++ cmake pkg-config libzmq3-dev libmsgpack-dev \
               libyaml-dev libcmocka-dev libssl-dev libjson-c-dev

.PHONY: all deps build run test test-plain test-asan test-tsan bench clean

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

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/sched-run $(CONFIG)

test-plain: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSCHED_SANITIZE=address $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ctest --output-on-failure -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DSCHED_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build $(BUILD_TSAN) -j $(JOBS)
	cd $(BUILD_TSAN) && ctest --output-on-failure -j $(JOBS) -L actors

test: test-plain test-asan test-tsan

# StarPU, the peer the benchmarks compare with, is only needed here.
bench: build
	@dpkg-query -W -f='$${Status}' libstarpu-dev 2>/dev/null | grep -q "install ok installed" || \
	  { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libstarpu-dev >/dev/null; \
	    else echo "libstarpu-dev is missing: the StarPU side is skipped"; fi; }
	@if pkg-config --exists starpu-1.3; then \
	  $(CC) -O2 -o $(BUILD)/starpu_bench bench/peers/starpu_bench.c $$(pkg-config --cflags --libs starpu-1.3); \
	fi
	./bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN)
