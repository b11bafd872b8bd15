#!/usr/bin/env bash
# compare_outputs.sh OLD_BIN NEW_BIN: runs two builds of `retnet` on the same fixed models (every
# mixer, seed 3) and tokens, and compares their outputs byte for byte: the logits of every form at
# two chunk sizes (the config's and 7), which forms each refuses, and the gradients of both
# training forms. Prints DIFF for every output that differs; used to show that a refactor changed
# no result, e.g.  dev/refactor/compare_outputs.sh /tmp/old/build/retnet build/retnet
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens=$(/usr/bin/python3 -c "import random; r = random.Random(7); print(','.join(str(r.randrange(256)) for _ in range(150)))")
dump() {  # dump BIN DIR
  local bin=$1 out=$2
  mkdir -p "$out"
  for mixer in retention attention linear performer aft aft-simple rwkv; do
    echo "{\"decoder_embed_dim\": 64, \"decoder_value_embed_dim\": 96, \"decoder_retention_heads\": 2, \"decoder_ffn_embed_dim\": 128, \"decoder_layers\": 2, \"vocab_size\": 256, \"mixer\": \"$mixer\", \"performer_features\": 16, \"aft_max_distance\": 256}" > "$out/$mixer.json"
    "$bin" init --config "$out/$mixer.json" --out "$out/$mixer.safetensors" --seed 3 > /dev/null 2>&1
    for form in parallel recurrent chunkwise scan; do
      for chunk in 0 7; do
        "$bin" logits -m "$out/$mixer.safetensors" --tokens "$tokens" --mode $form --chunk $chunk \
          -t 2 -o "$out/$mixer-$form-$chunk.npy" > /dev/null 2>&1 || echo refused > "$out/$mixer-$form-$chunk.refused"
      done
    done
    for form in parallel chunkwise; do
      "$bin" grad --model "$out/$mixer.safetensors" --tokens "$tokens" --form $form -t 2 \
        --out "$out/$mixer-grad-$form.safetensors" > /dev/null 2>&1 || echo refused > "$out/$mixer-grad-$form.refused"
    done
  done
}
dump "$1" "$work/old"
dump "$2" "$work/new"
n=0 differ=0
for f in "$work"/old/*; do
  n=$((n + 1))
  cmp -s "$f" "$work/new/$(basename "$f")" || { echo "DIFF $(basename "$f")"; differ=$((differ + 1)); }
done
echo "$n outputs compared, $differ differ"
[ "$differ" -eq 0 ]
