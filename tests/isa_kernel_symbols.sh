#!/usr/bin/env bash
# The per-level kernel objects (retnet/core/isa_kernels.h) must define nothing the linker could
# share between levels: an inline or template function emitted out of line (a weak symbol) would
# be one copy for every level, perhaps the AVX-512 one on a CPU without it. Every global symbol
# must sit in the object's own retnet::isa_<level> namespace. Type descriptions (typeinfo, which
# clang's UBSan emits for function types) are data, the same for every level, and pass; so does
# clang's __clang_call_terminate (two calls: catch, then std::terminate; no vector code), and the
# lock clang's OpenMP reductions share (.gomp_critical_user_.reduction.var: a mutex, no code).
# Usage: isa_kernel_symbols.sh OBJECT...   (the library's objects; others are skipped)
set -euo pipefail
checked=0
status=0
for object in "$@"; do
  case "$object" in
    */isa_kernels/*) ;;
    *) continue ;;
  esac
  level=$(basename "$(dirname "$object")")
  checked=$((checked + 1))
  # Defined global symbols other than the exception personality's reference.
  bad=$(nm -C --defined-only "$object" | awk '$2 ~ /^[A-Z]$/ && $2 !~ /^[BDRT]$/ || ($2 ~ /^[BDRT]$/ && $0 !~ /retnet::isa_'"$level"'::/)' |
        grep -v -E 'DW.ref.__gxx_personality_v0|typeinfo (name )?for |__clang_call_terminate$|\.gomp_critical_user_\.reduction\.var$' ||
        true)
  if [[ -n "$bad" ]]; then
    echo "$object: symbols outside retnet::isa_$level or shared between levels:"
    echo "$bad"
    status=1
  fi
done
if [[ $checked -eq 0 ]]; then
  echo "no per-level kernel objects among the arguments"
  exit 1
fi
echo "$checked per-level kernel objects checked"
exit $status
