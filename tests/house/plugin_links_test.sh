#!/usr/bin/env bash
# A first-party plugin links only what it runs: its symbols must not include the runtime (the generator, recipe
# parsing, the plugin loader, the composer), the networks it does not run (denoisers, teacher), nor spdlog; a plugin
# that needs no learning must not need LibTorch at all.
# Usage: plugin_links_test.sh PLUGIN.so learned|plain
set -uo pipefail
plugin=$1 kind=$2
fail() { echo "FAIL: $(basename "$plugin"): $*"; exit 1; }
[ -f "$plugin" ] || fail "no such file"
symbols=$(nm -C "$plugin") || fail "nm failed"
needed=$(readelf -d "$plugin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
runtime='rudder::Generator|rudder::parse_recipe|rudder::load_recipe|rudder::plugins::|rudder::Composer|rudder::load_model\(|rudder::CorpusDenoiser|rudder::TransformerDenoiser'
networks='rudder::nn::DenoiserNet|rudder::nn::ContinuousDenoiserNet|rudder::nn::DiscreteDenoiserNet|rudder::nn::TeacherLM'
found=$(grep -E "$runtime|$networks" <<<"$symbols" | head -5)
[ -z "$found" ] || fail "carries code it does not run: $found"
! grep -q 'spdlog' <<<"$symbols$needed" || fail "links spdlog: $(grep spdlog <<<"$symbols$needed" | head -3)"
if [ "$kind" = plain ]; then
  ! grep -Eq 'torch|c10' <<<"$needed" || fail "needs LibTorch: $needed"
fi
echo "ok: $(basename "$plugin") ($(stat -c %s "$plugin") bytes) links only what it runs"
