#!/usr/bin/env bash
# Formats every C++ and CUDA source of the tree with clang-format 14 and the root's
# .clang-format. With --check it changes nothing: it lists the files that differ from their
# formatted form (and the first lines of each difference) and exits 1 if any does; ctest's
# `format` test runs it so. Exit 77 (ctest: skipped) when clang-format 14 is not installed:
# other versions format differently (apt-get install clang-format on Debian 12).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "format: clang-format not found (apt-get install clang-format)"
  exit 77
fi
version=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "format: $cf is version $version; the tree is formatted with clang-format 14"
  exit 77
fi
if [ -d .git ] || git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.hpp' '*.h' '*.cuh' '*.cpp' '*.cu' '*.inc')
else
  mapfile -t files < <(find include tests tools bench examples nccl python -type f \
    \( -name '*.hpp' -o -name '*.h' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.cu' -o -name '*.inc' \) \
    -not -path '*/build/*' | sort)
fi
if [ "$check" = 0 ]; then
  "$cf" -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$cf" "$f" | cmp -s - "$f"; then
    echo "format: $f differs from its formatted form (bash scripts/format.sh fixes it):"
    "$cf" "$f" | diff -u "$f" - | sed -n '3,12p'
    bad=$((bad + 1))
  fi
done
echo "format: ${#files[@]} files checked, $bad not formatted"
[ "$bad" = 0 ]
