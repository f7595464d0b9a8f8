# fuse: set-up and build entry points. `make demo` and `make test` do everything on a fresh
# Debian 12 machine (they install what is missing first).
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=

DEB_PACKAGES := cmake ninja-build g++ catch2 libmlir-19-dev mlir-19-tools llvm-19-dev clang-19 lld-19 \
                libclang-rt-19-dev graphviz libgraphviz-dev libbenchmark-dev libopenblas-dev \
                libeigen3-dev libdnnl-dev libsleef-dev \
                python3-numpy libboost-context-dev \
                pybind11-dev python3-dev python3-pytest

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps build test demo bench bench-matmul gpu-kit test-asan test-tsan soak fuzz clean

# Idempotent: only calls apt-get when a package is missing, and runs `apt-get update` once then.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing $$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "make deps: all Debian packages present"; fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	./$(BUILD)/examples/gaussian_demo

# fuse fused, unfused and the machine's bandwidth limit side by side (bench/README.md); not part
# of `make test`. Flags pass through, e.g. make bench BENCH_ARGS=--benchmark_filter=softmax
BENCH_ARGS ?=
bench: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target fuse_bench matmul_bench
	./$(BUILD)/bench/fuse_bench $(BENCH_ARGS)
	./$(BUILD)/bench/matmul_bench $(MATMUL_BENCH_ARGS)

# Only the matmul table (fuse vs OpenBLAS vs FMA peak), e.g. MATMUL_BENCH_ARGS=--max=2048
bench-matmul: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target matmul_bench
	./$(BUILD)/bench/matmul_bench $(MATMUL_BENCH_ARGS)

# Everything a GPU machine without the compiler needs to check the CUDA backend: fuse-run, and
# for every example and catalog graph a bundle, inputs and the interpreter's outputs
# (build/gpu-kit; run build/gpu-kit/run.sh there).
gpu-kit: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target fuse-run fuse_gpu_kit
	./$(BUILD)/tests/fuse_gpu_kit $(BUILD)/gpu-kit
	cp $(BUILD)/frontends/fuse-run/fuse-run $(BUILD)/gpu-kit/

$(BUILD_ASAN)/build.ninja:
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFUSE_SANITIZE=ON $(CMAKE_FLAGS)

test-asan: deps $(BUILD_ASAN)/build.ninja
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer over the concurrency tests (tests/test_concurrency.cpp): 8 threads x 500 runs
# of every kernel form on shared and separate Executables, and concurrent compiles.
$(BUILD_TSAN)/build.ninja:
	cmake -S . -B $(BUILD_TSAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSE_TSAN=ON $(CMAKE_FLAGS)

test-tsan: deps $(BUILD_TSAN)/build.ninja
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target test_concurrency
	cd $(BUILD_TSAN) && FUSE_CONCURRENCY_RUNS=500 TSAN_OPTIONS=halt_on_error=1 \
	  ctest --output-on-failure -R '^test_concurrency:'

# Compiles and runs 10^4 distinct random graphs from 4 threads in one process with the caches
# bounded, printing resident memory as it goes (minutes). SOAK_GRAPHS and SOAK_THREADS change it.
SOAK_GRAPHS ?= 10000
SOAK_THREADS ?= 4
soak: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target fuse_soak
	FUSE_SOAK_GRAPHS=$(SOAK_GRAPHS) FUSE_SOAK_THREADS=$(SOAK_THREADS) ./$(BUILD)/tests/fuse_soak

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN)

# The fuzzers (libFuzzer + ASan/LeakSanitizer/UBSan, clang-19; tests/fuzz/run_fuzz.sh): the .expr
# front end, the .npy reader and the AOT bundle loader, RUNS executions each on one core, stopping
# at the first crash, hang, leak or sanitizer report. `make fuzz FUZZER=npy` runs one.
RUNS ?= 1000000
FUZZER ?= expr npy bundle
fuzz: deps
	@for f in $(FUZZER); do tests/fuzz/run_fuzz.sh $$f $(RUNS) || exit 1; done
