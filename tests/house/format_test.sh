#!/usr/bin/env bash
# The C++ and C sources are as .clang-format formats them. clang-format 14 (Debian 12's) is the formatter: another
# version places some constructs otherwise, so with any other, or none, the test is skipped (exit 77).
# Usage: format_test.sh SOURCE_DIR
set -uo pipefail
root=$1
formatter=$(command -v clang-format-14 || command -v clang-format) || { echo "no clang-format: skipped"; exit 77; }
version=$("$formatter" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
[ "$version" = 14 ] || { echo "clang-format $version, not 14: skipped"; exit 77; }
cd "$root" || exit 1
mapfile -t files < <(find host controllers sdk tests bench examples -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) -not -path 'tests/fuzz/corpus/*' | sort)
"$formatter" --dry-run --Werror "${files[@]}" 2> "${TMPDIR:-/tmp}/rudder_format_$$.log"
status=$?
if [ "$status" -ne 0 ]; then
  grep -o '^[^:]*\.[ch]p*:' "${TMPDIR:-/tmp}/rudder_format_$$.log" | sort -u | head -20
  echo "FAIL: these files are not as .clang-format formats them; run: clang-format -i FILE"
fi
rm -f "${TMPDIR:-/tmp}/rudder_format_$$.log"
[ "$status" -eq 0 ] && echo "ok: ${#files[@]} files formatted"
exit "$status"
