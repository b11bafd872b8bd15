#!/usr/bin/env bash
# A short soak of `retnet serve` (the 10-minute one is documented in docs/server.md): 16 clients
# for 20 s of mixed streamed and non-streamed requests, a quarter of them abandoned part-way, on a
# tiny model. `retnet bench serve --soak` fails on any failed request, a crash, a slot still busy
# at the end, or RSS growth past the tolerance.
#   run_soak.sh RETNET_BINARY WORKDIR
set -euo pipefail
retnet="$1" workdir="$2"
mkdir -p "$workdir"
cat > "$workdir/tiny.json" <<'JSON'
{"decoder_embed_dim": 32, "decoder_value_embed_dim": 48, "decoder_retention_heads": 4,
 "decoder_ffn_embed_dim": 40, "decoder_layers": 2, "vocab_size": 256, "recurrent_chunk_size": 8}
JSON
"$retnet" init --config "$workdir/tiny.json" -o "$workdir/tiny.safetensors" -s 5 >/dev/null
# An AddressSanitizer build does not judge RSS (its quarantine holds freed memory): the bench
# knows how it was built and says so in its output.
exec "$retnet" bench serve -m "$workdir/tiny.safetensors" --soak 20 --soak-clients 16 -n 48 \
  -t 1 --rss-tolerance 0.15 --json "$workdir/soak.json"
