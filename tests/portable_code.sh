#!/usr/bin/env bash
# A portable build (-DRETNET_NATIVE=OFF) must run on any x86-64 CPU: outside the per-level kernel
# objects of the avx2 and avx512 levels (retnet/core/isa_kernels.h), the only code allowed AVX
# instructions (VEX or EVEX encoded: mnemonics starting with "v") is the code compiled with a
# target attribute and reached only after a run-time CPU check, which names its level in its
# function names (block_avx2, block_avx512, vnni::group_dot, ...). Any other function with an
# AVX instruction would be illegal on a CPU without AVX.
# Usage: portable_code.sh OBJECT...   (the library's objects)
set -euo pipefail
checked=0
status=0
for object in "$@"; do
  case "$object" in
    */isa_kernels/avx2/* | */isa_kernels/avx512/*) continue ;;
  esac
  checked=$((checked + 1))
  bad=$(objdump -d --no-show-raw-insn -C "$object" |
        awk '/^[0-9a-f]+ <.*>:$/ { fn = $0; next }
             /\tv[a-z0-9]+([ \t]|$)/ && fn !~ /avx2|avx512|vnni/ { print fn }' | sort -u)
  if [[ -n "$bad" ]]; then
    echo "$object: AVX instructions in code compiled for baseline x86-64:"
    echo "$bad" | cut -c1-200 | head -20
    status=1
  fi
done
if [[ $checked -eq 0 ]]; then
  echo "no baseline objects among the arguments"
  exit 1
fi
echo "$checked baseline objects checked"
exit $status
