#!/usr/bin/env bash
# The installed package as its users meet it: `cmake --install` into a fresh prefix, then the out-of-tree examples
# (a controller in plain C, an application in C) built against it with find_package(Rudder CONFIG) and with
# pkg-config, run together; the installed CLI and the Python binding find the prefix's plugins and models; the
# installed librudder.so exports the C API and nothing else. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset RUDDER_PLUGIN_PATH RUDDER_MODEL_PATH RUDDER_LIBRARY
# The installed CLI and librudder.so must find the installed plugin scanner themselves; the index stays in $work.
unset RUDDER_PLUGIN_SCANNER
export RUDDER_CACHE_DIR=$work/cache
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || fail "install: $(cat "$work/install.log")"
libdir=$(dirname "$(find "$prefix" -name librudder.so -print -quit)")
[ -n "$libdir" ] && [ "$libdir" != . ] || fail "no librudder.so in the prefix"
for f in include/rudder/rudder.h include/rudder/rudder_plugin.h include/rudder/rudder_controller.hpp bin/rudder \
         libexec/rudder/rudder-plugin-scan \
         share/rudder/models/e2e-corpus/config.json share/rudder/examples/recipes/length_span_discrete.json; do
  [ -f "$prefix/$f" ] || fail "not installed: $f"
done
for f in rudder/plugins/rudder_length.so rudder/plugins/rudder_span.so cmake/Rudder/RudderConfig.cmake \
         cmake/Rudder/RudderController.cmake pkgconfig/rudder.pc rudder/python/rudder/__init__.py; do
  [ -f "$libdir/$f" ] || fail "not installed: <libdir>/$f"
done

# Only the C API leaves librudder.so: the runtime linked inside (LibTorch users, spdlog, ...) stays hidden.
others=$(nm -D --defined-only "$libdir/librudder.so" | awk '{print $3}' | grep -v '^rudder_' | grep -v '^$')
[ -z "$others" ] || fail "librudder.so exports more than rudder_*: $(head -5 <<<"$others")"

# The installed CLI finds the prefix's plugins and models, not the build tree's.
out=$("$prefix/bin/rudder" plugins) || fail "rudder plugins: exit $?"
grep -q "$libdir/rudder/plugins/rudder_length.so" <<<"$out" || fail "installed CLI does not use the prefix's plugins: $out"
# ... having scanned them with the prefix's scanner (without one they are loaded in-process and nothing is kept).
[ -f "$work/cache/plugin-index.json" ] && grep -q "$libdir/rudder/plugins/rudder_length.so" "$work/cache/plugin-index.json" \
  || fail "the installed CLI kept no plugin index"
out=$("$prefix/bin/rudder" models) || fail "rudder models: exit $?"
grep -q "$prefix/share/rudder/models" <<<"$out" && grep -q "e2e-corpus" <<<"$out" || fail "models: $out"

# Every first-party plugin library is installed, and each runs a recipe from the prefix with the prefix's models:
# length and span (hard constraints: always met), cfg and semantic, and the classifier controllers (pos, sentiment).
for f in rudder/plugins/rudder_length.so rudder/plugins/rudder_span.so rudder/plugins/rudder_cfg.so \
         rudder/plugins/rudder_syntax.so rudder/plugins/rudder_no_repeats.so include/rudder/rudder_json.hpp; do
  [ -f "$libdir/$f" ] || [ -f "$prefix/$f" ] || fail "not installed: $f"
done
out=$("$prefix/bin/rudder" plugins) || fail "rudder plugins: exit $?"
for id in length span no_repeats cfg semantic pos syntax_span syntax_tree sentiment; do
  grep -Eq "^  $id " <<<"$out" || fail "the installed CLI does not find controller '$id': $out"
done
run_installed() {  # name, controllers (JSON), labels that must be met in both samples, labels that must be judged
  printf '{"model": "e2e-discrete", "sampler": {"name": "analytic", "steps": 20}, "samples": 2, "seed": 1,
            "controllers": %s}\n' "$2" > "$work/$1.json"
  "$prefix/bin/rudder" generate --format text -o "$work/$1.txt" "$work/$1.json" > "$work/$1.err" 2>&1 \
    || fail "$1 from the prefix: $(cat "$work/$1.err")"
  for label in $3; do grep -q "^  $label: 2/2 satisfied" "$work/$1.err" || fail "$1: $label not met: $(cat "$work/$1.err")"; done
  for label in $4; do grep -Eq "^  $label: [0-2]/2 satisfied" "$work/$1.err" || fail "$1: $label not judged: $(cat "$work/$1.err")"; done
}
run_installed length_span '[{"plugin": "length", "params": {"tokens": 12}}, {"plugin": "span", "params": {"prefix": "The Eagle"}},
                            {"plugin": "no_repeats"}]' "length span no_repeats" ""
run_installed cfg_semantic '[{"plugin": "cfg", "params": {"condition": "name[The Eagle], food[French]"}},
                             {"plugin": "semantic", "params": {"fields": ["food[French]"]}}]' "" "cfg semantic"
run_installed classifiers '[{"plugin": "pos", "params": {"tags": ["DT", "NN", "VBZ"]}},
                            {"plugin": "sentiment", "params": {"polarity": "positive"}}]' "" "pos sentiment"

# find_package(Rudder CONFIG): the plain C plugin and the C application, each its own project.
cmake_build() {  # source folder, build folder
  { cmake -S "$1" -B "$2" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release && cmake --build "$2"; } \
    > "$2.log" 2>&1 || fail "building $1: $(cat "$2.log")"
}
cmake_build "$source/examples/c_plugin" "$work/plugin"
cmake_build "$source/examples/c_host" "$work/host"
[ -f "$work/plugin/rudder_banned_words.so" ] || fail "rudder_add_controller() made no rudder_banned_words.so"
exported=$(nm -D --defined-only "$work/plugin/rudder_banned_words.so" | awk '{print $3}' | grep -v '^$')
[ "$exported" = rudder_plugin_entry ] || fail "the plugin exports more than its entry point: $exported"
# The 0.1 target names (Rudder::sdk, Rudder::host) still work within this major version.
mkdir -p "$work/old_names"
cat > "$work/old_names/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.21)
project(old_names C)
find_package(Rudder 0.1 CONFIG REQUIRED)
add_executable(old_names main.c)
target_link_libraries(old_names PRIVATE Rudder::host Rudder::sdk)
CMAKE
printf '#include <rudder/rudder.h>\n#include <rudder/rudder_plugin.h>\nint main(void) { return rudder_api_version_major() == RUDDER_ABI_MAJOR ? 0 : 1; }\n' \
  > "$work/old_names/main.c"
cmake_build "$work/old_names" "$work/old_names/build"
"$work/old_names/build/old_names" || fail "a program built with the old target names does not run"

check_output() {  # label, output file
  [ "$(grep -c '^[0-9]*\. The Eagle' "$2")" -eq 4 ] || fail "$1: expected 4 samples starting with The Eagle: $(cat "$2")"
  [ "$(grep -c 'banned_words: ok' "$2")" -eq 4 ] || fail "$1: banned words not judged met 4 times: $(cat "$2")"
  [ "$(grep -c 'span: ok' "$2")" -eq 4 ] || fail "$1: span not met 4 times: $(cat "$2")"
  ! grep -Eq '^[0-9]+\. .*\b(pub|coffee|cheap)\b' "$2" || fail "$1: a banned word was generated: $(cat "$2")"
}
RUDDER_PLUGIN_PATH=$work/plugin "$work/host/rudder_c_host" "$source/examples/c_plugin/recipe.json" \
  > "$work/cmake_run.txt" 2> "$work/cmake_run.err" || fail "c_host: exit $?: $(cat "$work/cmake_run.err")"
check_output "find_package build" "$work/cmake_run.txt"
grep -q "step 100/100" "$work/cmake_run.err" || fail "no progress lines: $(cat "$work/cmake_run.err")"

# pkg-config: the same two sources with a plain compiler command line.
export PKG_CONFIG_PATH=$libdir/pkgconfig
mkdir -p "$work/pc"
cc -std=c99 -shared -fPIC -fvisibility=hidden $(pkg-config --cflags rudder) "$source/examples/c_plugin/banned_words.c" \
  -o "$work/pc/rudder_banned_words.so" || fail "pkg-config plugin build"
cc -std=c99 $(pkg-config --cflags rudder) "$source/examples/c_host/main.c" -o "$work/pc/c_host" \
  $(pkg-config --libs rudder) -Wl,-rpath,"$(pkg-config --variable=libdir rudder)" || fail "pkg-config host build"
[ "$(pkg-config --variable=plugindir rudder)" -ef "$libdir/rudder/plugins" ] || fail "pkg-config plugindir"
RUDDER_PLUGIN_PATH=$work/pc "$work/pc/c_host" "$source/examples/c_plugin/recipe.json" > "$work/pc_run.txt" \
  2> "$work/pc_run.err" || fail "pkg-config c_host: exit $?: $(cat "$work/pc_run.err")"
check_output "pkg-config build" "$work/pc_run.txt"
cmp -s "$work/cmake_run.txt" "$work/pc_run.txt" || fail "the two builds generated different samples"

# docs/writing-a-controller.md, followed as written: its code blocks are the files of examples/cpp_controllers, and
# the two C++ plugins build against the installed SDK and steer generation (keyword: a gradient; at weight 0 only
# 1 of these 16 samples mentions "Indian").
python3 - "$source" <<'PY' || fail "docs/writing-a-controller.md and examples/cpp_controllers differ"
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
blocks = re.findall(r'<!-- (\S+) -->\n```\w*\n(.*?)```', (root / "docs/writing-a-controller.md").read_text(), re.S)
assert len(blocks) == 3, blocks
for path, body in blocks:
    assert (root / path).read_text() == body, path + " differs from its copy in the doc"
PY
cmake_build "$source/examples/cpp_controllers" "$work/cpp"
# Rudder::plugin_json brings what rudder/rudder_json.hpp needs (nlohmann/json): a plugin that reads its params with it
# links that target alone.
mkdir -p "$work/json_plugin_src"
cat > "$work/json_plugin_src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.21)
project(json_plugin CXX)
find_package(Rudder CONFIG REQUIRED)
rudder_add_controller(reads_params SOURCES reads_params.cpp LIBRARIES Rudder::plugin_json)
CMAKE
cat > "$work/json_plugin_src/reads_params.cpp" <<'CPP'
#include <rudder/rudder_json.hpp>
#include <rudder/rudder_plugin.h>
// Builds and links; never loaded (it offers no controller).
extern "C" RUDDER_EXPORT const rudder_plugin* rudder_plugin_entry(uint32_t, uint32_t) {
    std::vector<rudder::json_input::Issue> issues;
    rudder::json_input::ObjectReader r(rudder::json_input::parse("{\"k\": 1}"), "", issues);
    (void)r.integer("k", 0, 2);
    return nullptr;
}
CPP
cmake_build "$work/json_plugin_src" "$work/json_plugin"
cat > "$work/keyword.json" <<'JSON'
{ "model": "e2e-corpus", "family": "discrete", "sampler": {"steps": 100}, "seed": 1, "samples": 16, "max_length": 40,
  "controllers": [ { "plugin": "keyword", "weight": 10, "params": { "word": "Indian" } },
                   { "plugin": "prefer_words", "weight": 0, "params": { "words": ["expensive"] } } ] }
JSON
RUDDER_PLUGIN_PATH=$work/cpp/plugins "$prefix/bin/rudder" generate --format text "$work/keyword.json" \
  > "$work/keyword.txt" 2>&1 || fail "keyword: $(cat "$work/keyword.txt")"
met=$(sed -n 's/^  keyword: \([0-9]*\)\/16 satisfied$/\1/p' "$work/keyword.txt")
[ -n "$met" ] && [ "$met" -ge 8 ] || fail "keyword guidance met ${met:-?}/16 (expected at least 8): $(cat "$work/keyword.txt")"

# The installed CLI runs the out-of-tree plugin too, with the same results.
RUDDER_PLUGIN_PATH=$work/plugin "$prefix/bin/rudder" generate --quiet --format text "$source/examples/c_plugin/recipe.json" \
  > "$work/cli_run.txt" 2>&1 || fail "installed CLI generate: $(cat "$work/cli_run.txt")"
[ "$(grep -c 'span: ok, banned_words: ok' "$work/cli_run.txt")" -eq 4 ] || fail "CLI: $(cat "$work/cli_run.txt")"

# The installed Python binding finds the installed librudder.so, which finds the prefix's models and plugins.
PYTHONPATH=$libdir/rudder/python PYTHONDONTWRITEBYTECODE=1 python3 - "$source/examples/recipes/length_span_discrete.json" \
  > "$work/python.txt" 2>&1 <<'PY' || fail "python: $(cat "$work/python.txt")"
import sys, rudder
samples = rudder.Generator(sys.argv[1]).generate(samples=2)
assert all(s.text.startswith("The Eagle") and s.controls["length"].satisfied for s in samples), samples
print(rudder._find_library())
PY
grep -q "^$libdir/librudder.so$" "$work/python.txt" || fail "python did not use the installed library: $(cat "$work/python.txt")"
echo "ok: installed to $prefix; out-of-tree plugin and app built with find_package and pkg-config and run"
