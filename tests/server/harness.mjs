// What the npm-driven server tests share: their --name value arguments, a failure list, a free
// loopback port, and the tiny model they serve (written with `retnet init` into the work dir).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
fs.mkdirSync(args.workdir, { recursive: true });

export const failures = [];
export const check = (cond, what) => { if (!cond) { failures.push(what); console.log(`FAIL: ${what}`); } };

export const freePort = () => new Promise((resolve) => {
  const s = net.createServer();
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
});

export function tinyModel() {
  const cfg = path.join(args.workdir, 'tiny.json');
  fs.writeFileSync(cfg, JSON.stringify({ decoder_embed_dim: 32, decoder_value_embed_dim: 48,
    decoder_retention_heads: 4, decoder_ffn_embed_dim: 40, decoder_layers: 2, vocab_size: 256,
    recurrent_chunk_size: 8 }));
  const model = path.join(args.workdir, 'tiny.safetensors');
  execFileSync(args.retnet, ['init', '--config', cfg, '-o', model, '-s', '5'], { stdio: 'ignore' });
  return model;
}
