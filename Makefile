# Thin wrapper around CMake: installs what the build needs, builds, runs, tests.
#   make run        build sched-run (only it and the library) and run it on configs/saxpy.yaml
#   make test       the whole suite, stage by stage: plain (GCC), ASan+UBSan,
#                   TSan for the threaded tests, clang without cuda.h, the other
#                   build types, and the tests that wait for time on a busy machine
#   make bench      run the benchmarks and rewrite bench/RESULTS.md
#   make install    install the release build under PREFIX (default /usr/local)
#   make uninstall  remove what `make install` installed
#
# Each build step writes its whole output to a log in its build directory and
# prints a line per step, the progress and any warning (cmake/step.sh).

BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_PORTABLE ?= build-portable
BUILD_RELEASE ?= build-release
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc)
CONFIG     ?= configs/saxpy.yaml
CMAKE_FLAGS ?=
export JOBS
# The project's own builds treat warnings as errors; consumers' builds do not.
OWN_FLAGS  = -DSCHEDRUN_WERROR=ON $(CMAKE_FLAGS)
# Where the CUDA toolkit's cuda.h lies here, hidden from the portable build so
# that it configures as on a machine without the toolkit.
CUDA_INCLUDE_DIRS = $(sort /usr/local/cuda/include $(realpath /usr/local/cuda/include) /opt/cuda/include)
STEP = ./cmake/step.sh

# Debian packages the build and the host backend need (python3-numpy and
# graphviz: the tests read --output with numpy.load and render --dot with dot;
# python3-pytest and python3-matplotlib: the Python package's tests and its
# timeline picture).
DEB_PACKAGES = build-essential g++ clang binutils cmake pkg-config libzmq3-dev libmsgpack-dev \
               libyaml-dev libcmocka-dev libssl-dev libjson-c-dev python3-numpy graphviz \
               openmpi-bin libopenmpi-dev python3-pytest python3-matplotlib

# The stages of `make test`, in order; every stage runs, whatever the ones
# before it did, and the end says how each went.
TEST_STAGES = test-plain test-asan test-tsan test-portable test-build-types test-load

.PHONY: all deps configure build run test $(TEST_STAGES) bench fuzz install uninstall clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    log=$$(mktemp /tmp/schedrun-apt-XXXXXX.log); \
	    echo "deps: installing$$missing (log: $$log)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } >$$log 2>&1 || \
	      { echo "deps: apt-get failed:"; tail -n 20 $$log; exit 1; }; \
	  else \
	    echo "missing Debian packages:$$missing (run 'make deps' as root)"; exit 1; \
	  fi; \
	else echo "deps: every package the build needs is installed"; fi

configure: deps
	@$(STEP) configure $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(OWN_FLAGS)

# everything: the library, sched-run, the examples, the tests, the benchmarks
build: configure
	@$(STEP) build $(BUILD)

# only sched-run and what it needs
run: configure
	@$(STEP) build $(BUILD) sched-run
	./$(BUILD)/sched-run $(CONFIG)

test-plain: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# ASan+UBSan with clang, which also builds the libFuzzer targets (ctest label
# fuzz: each corpus replayed, then a short bounded run). Less the GPU script
# on the driver double (label gpu-script), a shell script that runs sched-run
# through paths the other tests take under ASan already.
test-asan: deps
	@CC=clang $(STEP) configure $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSCHEDRUN_SANITIZE=address -DSCHEDRUN_FUZZ=ON $(OWN_FLAGS)
	@$(STEP) build $(BUILD_ASAN)
	cd $(BUILD_ASAN) && ctest --output-on-failure -j $(JOBS) -LE '^gpu-script$$'

# The threaded tests, less those whose weight is data volume (label data:
# the example workloads on the double, the 3 GiB buffer), which take the
# same thread paths as the others with hundreds of megabytes through the
# sanitizer's memcpy; they run in the plain and ASan stages.
test-tsan: deps
	@$(STEP) configure $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DSCHEDRUN_SANITIZE=thread $(OWN_FLAGS)
	@$(STEP) build $(BUILD_TSAN)
	cd $(BUILD_TSAN) && ctest --output-on-failure -j $(JOBS) -L 'actors|cuda-double|mpi|builder|dag|alloc' -LE '^data$$'

# clang, Release, with cuda.h out of reach: the CUDA backend is left out and
# the plain suite still passes (test_no_cuda exists only in such a build),
# less MPI across ranks and the data-volume tests (labels mpi and data),
# which do not reach the backend's absence and run in the stages before.
test-portable: deps
	@env -u CUDA_HOME -u CUDA_PATH CC=clang $(STEP) configure $(BUILD_PORTABLE) -DCMAKE_BUILD_TYPE=Release \
	  "-DCMAKE_IGNORE_PATH=$(subst $(eval) ,;,$(CUDA_INCLUDE_DIRS))" $(OWN_FLAGS)
	@$(STEP) build $(BUILD_PORTABLE)
	cd $(BUILD_PORTABLE) && ctest --output-on-failure --no-tests=error -R '^test_no_cuda$$' && \
	  ctest --output-on-failure -j $(JOBS) -LE '^(mpi|data)$$'

# The other build types build too (the library and sched-run; GCC).
test-build-types: deps
	@for t in Debug Release MinSizeRel; do \
	  $(STEP) configure build-$$t -DCMAKE_BUILD_TYPE=$$t -DSCHEDRUN_BUILD_TESTS=OFF \
	    -DSCHEDRUN_BUILD_BENCH=OFF -DSCHEDRUN_BUILD_EXAMPLES=OFF $(OWN_FLAGS) && \
	  $(STEP) build build-$$t || exit 1; \
	done

# The tests that wait for time (ctest label timing), again, beside two busy
# loops per core: a test that guesses the machine's speed fails here.
test-load: build
	./tests/load.sh $(BUILD)

test: deps
	@summary=$$(mktemp); failed=0; t_all=$$(date +%s); \
	for s in $(TEST_STAGES); do \
	  t0=$$(date +%s); echo "=== make $$s"; \
	  if $(MAKE) --no-print-directory $$s; then r=passed; else r=FAILED; failed=$$((failed + 1)); fi; \
	  printf '  %-18s %-7s %5d s\n' $$s $$r $$(( $$(date +%s) - t0 )) >>$$summary; \
	done; \
	echo "=== make test: every stage, in $$(( $$(date +%s) - t_all )) s"; cat $$summary; rm -f $$summary; \
	echo "stages: $$(( $(words $(TEST_STAGES)) - failed )) passed, $$failed failed"; \
	[ $$failed -eq 0 ]

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
	@CC=clang $(STEP) configure $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSCHEDRUN_SANITIZE=address -DSCHEDRUN_FUZZ=ON $(OWN_FLAGS)
	@$(STEP) build $(BUILD_ASAN) fuzz_codec fuzz_loader fuzz_expr
	for t in codec loader expr; do \
	  mkdir -p $(BUILD_ASAN)/tests/fuzz-work/$$t; \
	  ./$(BUILD_ASAN)/tests/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 $(BUILD_ASAN)/tests/fuzz-work/$$t tests/fuzz/corpus/$$t 2>&1 | \
	    grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==ERROR|SUMMARY)' | sed "s/^/$$t: /"; \
	done

# A release build of the library, sched-run and their files under PREFIX
# (DESTDIR works as usual); the list of what went where is kept for uninstall,
# which removes those files and the directories of schedrun's own left empty.
install: deps
	@$(STEP) configure $(BUILD_RELEASE) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) \
	  -DSCHEDRUN_BUILD_TESTS=OFF -DSCHEDRUN_BUILD_BENCH=OFF -DSCHEDRUN_BUILD_EXAMPLES=OFF $(OWN_FLAGS)
	@$(STEP) build $(BUILD_RELEASE)
	@cmake --install $(BUILD_RELEASE) --prefix $(PREFIX) >$(BUILD_RELEASE)/install.log && \
	  echo "install: $$(grep -c . $(BUILD_RELEASE)/install_manifest.txt) files under $(DESTDIR)$(PREFIX) (list: $(BUILD_RELEASE)/install_manifest.txt)"

uninstall:
	@if [ ! -f $(BUILD_RELEASE)/install_manifest.txt ]; then echo "uninstall: nothing installed from here ($(BUILD_RELEASE)/install_manifest.txt is missing)"; exit 1; fi
	@n=0; while IFS= read -r f || [ -n "$$f" ]; do \
	  f="$(DESTDIR)$$f"; \
	  if [ -e "$$f" ] || [ -L "$$f" ]; then rm -f "$$f" && n=$$((n + 1)); fi; \
	  d=$$(dirname "$$f"); \
	  while case "$$d" in */schedrun|*/schedrun/*) true;; *) false;; esac && rmdir "$$d" 2>/dev/null; do d=$$(dirname "$$d"); done; \
	done < $(BUILD_RELEASE)/install_manifest.txt; \
	echo "uninstall: removed $$n files installed under $(DESTDIR)$(PREFIX)"

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_PORTABLE) $(BUILD_RELEASE) build-Debug build-Release build-MinSizeRel
